// Package deploy_test checks that config/default, what `make deploy` applies,
// is accepted by a real kube-apiserver and runs the manager hardened.
package deploy_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

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
	objs, err := env.Kustomize(ctx(t), filepath.Join(root, "config", "default"))
	if err != nil {
		t.Fatal(err)
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
	pod, err := testenv.PodFromTemplate(manager(t, objs))
	if err != nil {
		t.Fatal(err)
	}
	if out := apply(t, pod, "--dry-run=server"); !strings.Contains(out, "(server dry run)") {
		t.Errorf("a pod from the manager's template: %q", out)
	}
}

// TestManagerDeploymentIsHardened checks the manager's pod against what a
// restricted namespace and an operator's reviewer expect.
func TestManagerDeploymentIsHardened(t *testing.T) {
	for _, p := range testenv.ManagerPodProblems(manager(t, render(t))) {
		t.Error(p)
	}
}

// TestServicesReachTheManager checks every Service selects the manager's pod
// and targets a port it declares.
func TestServicesReachTheManager(t *testing.T) {
	objs := render(t)
	problems, err := testenv.ServiceProblems(objs, manager(t, objs))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
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
	for _, p := range env.ManagerPermissionProblems(ctx(t), d) {
		t.Error(p)
	}
}

// apply pipes one object to kubectl apply with extra flags.
func apply(t *testing.T, o *unstructured.Unstructured, flags ...string) string {
	t.Helper()
	out, err := env.Apply(ctx(t), o, flags...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// manager returns the one Deployment of the render.
func manager(t *testing.T, objs []*unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	d, err := testenv.ManagerDeployment(objs)
	if err != nil {
		t.Fatalf("config/default: %v", err)
	}
	return d
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return c
}
