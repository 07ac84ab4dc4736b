package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// DecodeManifests splits a multi-document YAML stream (kustomize's or
// Helm's output) into objects, skipping empty documents.
func DecodeManifests(stream string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(stream), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, fmt.Errorf("decoding manifests: %w", err)
		}
		if obj != nil {
			objs = append(objs, &unstructured.Unstructured{Object: obj})
		}
	}
}

// Kustomize returns the objects `kubectl kustomize dir` builds.
func (e *Env) Kustomize(ctx context.Context, dir string) ([]*unstructured.Unstructured, error) {
	out, _, err := e.Kubectl(ctx, "kustomize", dir)
	if err != nil {
		return nil, err
	}
	objs, err := DecodeManifests(out)
	if err == nil && len(objs) == 0 {
		err = fmt.Errorf("%s renders no objects", dir)
	}
	return objs, err
}

// Apply pipes one object to `kubectl apply -f -` with extra flags (e.g.
// --server-side, --dry-run=server) and returns kubectl's output.
func (e *Env) Apply(ctx context.Context, o *unstructured.Unstructured, flags ...string) (string, error) {
	b, err := yaml.Marshal(o.Object)
	if err != nil {
		return "", err
	}
	args := append([]string{"--kubeconfig=" + e.KubeconfigPath, "apply", "-f", "-"}, flags...)
	cmd := exec.CommandContext(ctx, e.KubectlPath, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.KubeconfigPath)
	cmd.Stdin = strings.NewReader(string(b))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl apply %s of %s/%s: %w\n%s", strings.Join(flags, " "), o.GetKind(), o.GetName(), err, out)
	}
	return string(out), nil
}

// ManagerDeployment returns the one Deployment among objs: config/default
// and the Helm chart each deploy the manager as exactly one.
func ManagerDeployment(objs []*unstructured.Unstructured) (*appsv1.Deployment, error) {
	var found []*appsv1.Deployment
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			d := &appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d); err != nil {
				return nil, err
			}
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("want one Deployment, got %d", len(found))
	}
	return found[0], nil
}

// PodFromTemplate is the Pod a Deployment's template makes, for a dry run:
// PodSecurity admission checks Pods, not Deployments.
func PodFromTemplate(d *appsv1.Deployment) (*unstructured.Unstructured, error) {
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: d.Spec.Template.ObjectMeta,
		Spec:       d.Spec.Template.Spec,
	}
	pod.Name, pod.Namespace = d.Name+"-dry-run", d.Namespace
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pod)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: u}, nil
}

// ManagerPodProblems lists what in the manager's pod falls short of what a
// restricted namespace and an operator's reviewer expect; none is good.
func ManagerPodProblems(d *appsv1.Deployment) []string {
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		return []string{fmt.Sprintf("want one container, got %d", len(pod.Containers))}
	}
	c := pod.Containers[0]
	psc, csc := pod.SecurityContext, c.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if csc == nil {
		return []string{"the manager container has no securityContext"}
	}
	var problems []string
	check := func(ok bool, what string) {
		if !ok {
			problems = append(problems, what)
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

	check(BoolArg(c.Args, "--leader-elect", false), "the manager runs without --leader-elect")
	check(!HasArg(c.Args, "--gateway-auth=none"), "the gateway runs without authentication")
	check(BoolArg(c.Args, "--gateway-tls", true), "the gateway serves plain HTTP")
	check(BoolArg(c.Args, "--metrics-secure", true), "the metrics are served without authentication")
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
	}{{"liveness", c.LivenessProbe}, {"readiness", c.ReadinessProbe}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			problems = append(problems, "no HTTP "+p.name+" probe")
			continue
		}
		// The probe must reach the port the manager serves its probes on.
		port := ContainerPort(c, p.probe.HTTPGet.Port.String())
		check(port != 0 && port == ArgPort(c.Args, "--health-probe-bind-address"),
			fmt.Sprintf("the %s probe's port %s is not --health-probe-bind-address", p.name, p.probe.HTTPGet.Port.String()))
	}
	// With a read-only root, anything the manager or its stdio children
	// write must go to a mounted volume.
	tmp := false
	for _, m := range c.VolumeMounts {
		tmp = tmp || (m.MountPath == "/tmp" && !m.ReadOnly)
	}
	check(tmp, "no writable /tmp is mounted")
	return problems
}

// ServiceProblems lists the Services among objs that miss the manager: in
// another namespace, selecting labels its pod lacks, or targeting a port it
// does not declare.
func ServiceProblems(objs []*unstructured.Unstructured, d *appsv1.Deployment) ([]string, error) {
	labels := d.Spec.Template.Labels
	var problems []string
	for _, o := range objs {
		if o.GetKind() != "Service" {
			continue
		}
		var svc corev1.Service
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &svc); err != nil {
			return nil, err
		}
		if svc.Namespace != d.Namespace {
			problems = append(problems, fmt.Sprintf("service %s is in %q, the manager in %q", svc.Name, svc.Namespace, d.Namespace))
		}
		for k, v := range svc.Spec.Selector {
			if labels[k] != v {
				problems = append(problems, fmt.Sprintf("service %s selects %s=%s, which the manager's pod lacks", svc.Name, k, v))
			}
		}
		for _, p := range svc.Spec.Ports {
			if ContainerPort(d.Spec.Template.Spec.Containers[0], p.TargetPort.String()) == 0 {
				problems = append(problems, fmt.Sprintf("service %s targets port %s, which the manager does not declare", svc.Name, p.TargetPort.String()))
			}
		}
	}
	return problems, nil
}

// HasArg reports whether args hold want; a bare boolean flag also matches
// its =true form.
func HasArg(args []string, want string) bool {
	for _, a := range args {
		if a == want || (!strings.Contains(want, "=") && a == want+"=true") {
			return true
		}
	}
	return false
}

// BoolArg is the value the manager sees for a boolean flag: the last
// --flag or --flag=value among args, def when there is none.
func BoolArg(args []string, flag string, def bool) bool {
	v := def
	for _, a := range args {
		if a == flag {
			v = true
		} else if s, ok := strings.CutPrefix(a, flag+"="); ok {
			b, err := strconv.ParseBool(s)
			v = b && err == nil
		}
	}
	return v
}

// ArgPort is the port of a --flag=host:port argument, 0 if absent.
func ArgPort(args []string, flag string) int32 {
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

// ContainerPort resolves a port name or number to a declared container
// port, 0 if the container declares none such.
func ContainerPort(c corev1.Container, nameOrNumber string) int32 {
	for _, p := range c.Ports {
		if p.Name == nameOrNumber || fmt.Sprint(p.ContainerPort) == nameOrNumber {
			return p.ContainerPort
		}
	}
	return 0
}

func isTrue(b *bool) bool { return b != nil && *b }

func runtimeDefaultSeccomp(p *corev1.SeccompProfile) bool {
	return p != nil && p.Type == corev1.SeccompProfileTypeRuntimeDefault
}

// ManagerPermissionProblems asks the apiserver's RBAC whether the
// ServiceAccount of the manager's Deployment d may do what the controller,
// leader election, the gateway's token auth and the metrics' auth do, and
// lists what it may not; the RBAC must be applied.
func (e *Env) ManagerPermissionProblems(ctx context.Context, d *appsv1.Deployment) []string {
	as := fmt.Sprintf("--as=system:serviceaccount:%s:%s", d.Namespace, d.Spec.Template.Spec.ServiceAccountName)
	var problems []string
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
		// The gateway with --gateway-auth=token and the metrics with
		// --metrics-secure each review tokens.
		{"create", "tokenreviews.authentication.k8s.io"},
		{"create", "subjectaccessreviews.authorization.k8s.io"},
	} {
		out, _, err := e.Kubectl(ctx, append([]string{"auth", "can-i", as}, c...)...)
		if err != nil || strings.TrimSpace(out) != "yes" {
			problems = append(problems, fmt.Sprintf("the manager may not %s: %q %v", strings.Join(c, " "), strings.TrimSpace(out), err))
		}
	}
	return problems
}
