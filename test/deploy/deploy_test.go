// Package deploy_test checks that config/default, what `make deploy` applies,
// is accepted by a real kube-apiserver and runs the manager hardened.
package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/mcpbridge/operator/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	if env, err = testenv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "starting the control plane:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
	}
	os.Exit(code)
}

// render returns config/default as kustomize builds it for `make deploy`.
func render(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := env.Kubectl(ctx(t), "kustomize", filepath.Join(root, "config", "default"))
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding the kustomize output: %v", err)
		}
		if obj != nil {
			objs = append(objs, &unstructured.Unstructured{Object: obj})
		}
	}
	if len(objs) == 0 {
		t.Fatal("config/default renders no objects")
	}
	return objs
}

// TestEveryObjectPassesServerDryRun applies each rendered object with both
// client-side and server-side (`make deploy`) apply, dry run on the server:
// schema, validation and admission all run, nothing is stored.
func TestEveryObjectPassesServerDryRun(t *testing.T) {
	objs := render(t)
	// A namespaced dry run needs its namespace to exist; a real apply
	// creates the Namespace first in the same run, so create it for real.
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			apply(t, o, "--server-side")
		}
	}
	for _, o := range objs {
		t.Run(o.GetKind()+"/"+o.GetName(), func(t *testing.T) {
			for _, mode := range [][]string{{"--dry-run=server"}, {"--server-side", "--dry-run=server"}} {
				out := apply(t, o, mode...)
				if !strings.HasSuffix(strings.TrimSpace(out), "(server dry run)") {
					t.Errorf("kubectl apply %s: %q", strings.Join(mode, " "), out)
				}
			}
		})
	}

	// PodSecurity admission checks pods, not Deployments: a dry-run Pod from
	// the template proves that the namespace's enforce level admits it.
	d := manager(t, objs)
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: d.Spec.Template.ObjectMeta,
		Spec:       d.Spec.Template.Spec,
	}
	pod.Name, pod.Namespace = d.Name+"-dry-run", d.Namespace
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pod)
	if err != nil {
		t.Fatal(err)
	}
	if out := apply(t, &unstructured.Unstructured{Object: u}, "--dry-run=server"); !strings.Contains(out, "(server dry run)") {
		t.Errorf("a pod from the manager's template: %q", out)
	}
}

// TestManagerDeploymentIsHardened checks the manager's pod against what a
// restricted namespace and an operator's reviewer expect.
func TestManagerDeploymentIsHardened(t *testing.T) {
	objs := render(t)
	d := manager(t, objs)
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Containers))
	}
	c := pod.Containers[0]
	psc, csc := pod.SecurityContext, c.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if csc == nil {
		t.Fatal("the manager container has no securityContext")
	}

	check := func(ok bool, what string) {
		t.Helper()
		if !ok {
			t.Error(what)
		}
	}
	check(isTrue(psc.RunAsNonRoot) || isTrue(csc.RunAsNonRoot), "runAsNonRoot is not true")
	check(isTrue(csc.ReadOnlyRootFilesystem), "readOnlyRootFilesystem is not true")
	check(csc.AllowPrivilegeEscalation != nil && !*csc.AllowPrivilegeEscalation, "allowPrivilegeEscalation is not false")
	check(csc.Capabilities != nil && len(csc.Capabilities.Drop) == 1 && csc.Capabilities.Drop[0] == "ALL" &&
		len(csc.Capabilities.Add) == 0, "capabilities do not drop exactly ALL, adding none")
	check(runtimeDefaultSeccomp(psc.SeccompProfile) || runtimeDefaultSeccomp(csc.SeccompProfile), "the seccomp profile is not RuntimeDefault")
	check(!isTrue(csc.Privileged), "the container is privileged")

	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := c.Resources.Requests[r], c.Resources.Limits[r]
		check(!req.IsZero(), "no "+string(r)+" request")
		check(!lim.IsZero(), "no "+string(r)+" limit")
		check(req.Cmp(lim) <= 0, string(r)+" request exceeds its limit")
	}

	check(hasArg(c.Args, "--leader-elect"), "the manager runs without --leader-elect")
	check(!hasArg(c.Args, "--gateway-auth=none"), "the gateway runs without authentication")
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
	}{{"liveness", c.LivenessProbe}, {"readiness", c.ReadinessProbe}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("no HTTP %s probe", p.name)
			continue
		}
		// The probe must reach the port the manager serves its probes on.
		port := containerPort(c, p.probe.HTTPGet.Port.String())
		check(port != 0 && port == argPort(c.Args, "--health-probe-bind-address"),
			fmt.Sprintf("the %s probe's port %s is not --health-probe-bind-address", p.name, p.probe.HTTPGet.Port.String()))
	}
	// With a read-only root, anything the manager or its stdio children
	// write must go to a mounted volume.
	tmp := false
	for _, m := range c.VolumeMounts {
		tmp = tmp || (m.MountPath == "/tmp" && !m.ReadOnly)
	}
	check(tmp, "no writable /tmp is mounted")
}

// TestServicesReachTheManager checks every Service selects the manager's pod
// and targets a port it declares.
func TestServicesReachTheManager(t *testing.T) {
	objs := render(t)
	d := manager(t, objs)
	labels := d.Spec.Template.Labels
	for _, o := range objs {
		if o.GetKind() != "Service" {
			continue
		}
		var svc corev1.Service
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &svc); err != nil {
			t.Fatal(err)
		}
		if svc.Namespace != d.Namespace {
			t.Errorf("service %s is in %q, the manager in %q", svc.Name, svc.Namespace, d.Namespace)
		}
		for k, v := range svc.Spec.Selector {
			if labels[k] != v {
				t.Errorf("service %s selects %s=%s, which the manager's pod lacks", svc.Name, k, v)
			}
		}
		for _, p := range svc.Spec.Ports {
			if containerPort(d.Spec.Template.Spec.Containers[0], p.TargetPort.String()) == 0 {
				t.Errorf("service %s targets port %s, which the manager does not declare", svc.Name, p.TargetPort.String())
			}
		}
	}
}

// TestServiceAccountMayRunTheController applies config/default for real and
// asks the apiserver's RBAC whether the manager's ServiceAccount may do what
// the controller, leader election and the gateway's token auth do.
func TestServiceAccountMayRunTheManager(t *testing.T) {
	objs := render(t)
	d := manager(t, objs)
	for _, o := range objs {
		if o.GetKind() == "Namespace" || o.GetKind() == "CustomResourceDefinition" {
			apply(t, o, "--server-side")
		}
	}
	for _, o := range objs {
		apply(t, o, "--server-side")
	}
	as := fmt.Sprintf("--as=system:serviceaccount:%s:%s", d.Namespace, d.Spec.Template.Spec.ServiceAccountName)
	for _, c := range [][]string{
		{"get", "mcpservers.mcpbridge.dev", "-A"},
		{"list", "mcpservers.mcpbridge.dev", "-A"},
		{"watch", "mcpservers.mcpbridge.dev", "-A"},
		{"patch", "mcpservers.mcpbridge.dev", "--subresource=status", "-A"},
		{"get", "secrets", "-A"},
		{"list", "secrets", "-A"},
		{"watch", "secrets", "-A"},
		{"get", "configmaps", "-A"},
		{"list", "configmaps", "-A"},
		{"watch", "configmaps", "-A"},
		{"create", "events.events.k8s.io", "-A"},
		{"get", "leases.coordination.k8s.io", "-n", d.Namespace},
		{"create", "leases.coordination.k8s.io", "-n", d.Namespace},
		{"update", "leases.coordination.k8s.io", "-n", d.Namespace},
		// The gateway runs with --gateway-auth=token (asserted above).
		{"create", "tokenreviews.authentication.k8s.io"},
		{"create", "subjectaccessreviews.authorization.k8s.io"},
	} {
		out, _, err := env.Kubectl(ctx(t), append([]string{"auth", "can-i", as}, c...)...)
		if err != nil || strings.TrimSpace(out) != "yes" {
			t.Errorf("the manager may not %s: %q %v", strings.Join(c, " "), strings.TrimSpace(out), err)
		}
	}
}

// apply pipes one object to kubectl apply with extra flags.
func apply(t *testing.T, o *unstructured.Unstructured, flags ...string) string {
	t.Helper()
	b, err := yaml.Marshal(o.Object)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--kubeconfig=" + env.KubeconfigPath, "apply", "-f", "-"}, flags...)
	cmd := exec.CommandContext(ctx(t), env.KubectlPath, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.KubeconfigPath)
	cmd.Stdin = strings.NewReader(string(b))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply %s of %s/%s: %v\n%s", strings.Join(flags, " "), o.GetKind(), o.GetName(), err, out)
	}
	return string(out)
}

// manager returns the one Deployment of the render.
func manager(t *testing.T, objs []*unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	var found []*appsv1.Deployment
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			d := &appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d); err != nil {
				t.Fatal(err)
			}
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one Deployment in config/default, got %d", len(found))
	}
	return found[0]
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func isTrue(b *bool) bool { return b != nil && *b }

func runtimeDefaultSeccomp(p *corev1.SeccompProfile) bool {
	return p != nil && p.Type == corev1.SeccompProfileTypeRuntimeDefault
}

func hasArg(args []string, want string) bool {
	for _, a := range args {
		if a == want || (!strings.Contains(want, "=") && a == want+"=true") {
			return true
		}
	}
	return false
}

// argPort is the port of a --flag=host:port argument, 0 if absent.
func argPort(args []string, flag string) int32 {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			if _, port, err := net.SplitHostPort(v); err == nil {
				var n int32
				_, _ = fmt.Sscan(port, &n)
				return n
			}
		}
	}
	return 0
}

// containerPort resolves a port name or number to a declared container port,
// 0 if the container declares none such.
func containerPort(c corev1.Container, nameOrNumber string) int32 {
	for _, p := range c.Ports {
		if p.Name == nameOrNumber || fmt.Sprint(p.ContainerPort) == nameOrNumber {
			return p.ContainerPort
		}
	}
	return 0
}
