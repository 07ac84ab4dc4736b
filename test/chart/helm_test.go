package chart_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/mcpbridge/operator/internal/testenv"
)

// releaseName and releaseNamespace are what the README's install command
// uses; with them the chart names its objects mcp-bridge-*.
const (
	releaseName      = "mcp-bridge"
	releaseNamespace = "mcpbridge-system"
)

var (
	env  *testenv.Env
	root string // the operator module's root
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	var err error
	if root, err = testenv.ModuleRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if env, err = testenv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "starting the control plane:", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}()
	// The tests handle CRDs: the envtest client learns their type.
	if err := apiextensionsv1.AddToScheme(env.Scheme); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The chart installs into a namespace the user made, labelled as the
	// README says, as config/default's own Namespace is.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNamespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := env.Client.Create(ctx, ns); err != nil {
		fmt.Fprintln(os.Stderr, "creating the release namespace:", err)
		return 1
	}
	return m.Run()
}

func chartDir() string { return filepath.Join(root, "charts", "mcp-bridge") }

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir())
	if err != nil {
		t.Fatalf("loading %s: %v", chartDir(), err)
	}
	return ch
}

// quiet keeps Helm's own logging out of the test output.
func quiet() action.ConfigurationOption {
	return action.ConfigurationSetLogger(slog.NewTextHandler(io.Discard, nil))
}

// render renders the chart with vals over values.yaml as `helm template`
// does (client only, values checked against values.schema.json), and
// returns the objects and NOTES.txt.
func render(t *testing.T, vals map[string]any) ([]*unstructured.Unstructured, string) {
	t.Helper()
	rel, err := renderRelease(t, vals)
	if err != nil {
		t.Fatalf("rendering with %v: %v", vals, err)
	}
	objs, err := testenv.DecodeManifests(rel.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	return objs, rel.Info.Notes
}

func renderRelease(t *testing.T, vals map[string]any) (*releasev1.Release, error) {
	t.Helper()
	inst := action.NewInstall(action.NewConfiguration(quiet()))
	inst.DryRunStrategy = action.DryRunClient
	inst.ReleaseName, inst.Namespace = releaseName, releaseNamespace
	inst.Replace = true
	r, err := inst.Run(loadChart(t), vals)
	if err != nil {
		return nil, err
	}
	return r.(*releasev1.Release), nil
}

// helmConfig is an action configuration against envtest, with releases
// stored in Secrets as the helm CLI stores them.
func helmConfig(t *testing.T) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	kubeconfig, ns := env.KubeconfigPath, releaseNamespace
	flags.KubeConfig, flags.Namespace = &kubeconfig, &ns
	cfg := action.NewConfiguration(quiet())
	if err := cfg.Init(flags, releaseNamespace, "secret"); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// install runs `helm install` for real on envtest; it waits for nothing,
// since no kubelet runs the manager's pod.
func install(t *testing.T, vals map[string]any) *releasev1.Release {
	t.Helper()
	inst := action.NewInstall(helmConfig(t))
	inst.ReleaseName, inst.Namespace = releaseName, releaseNamespace
	inst.WaitStrategy = kube.HookOnlyStrategy
	inst.Timeout = time.Minute
	r, err := inst.RunWithContext(ctx(t), loadChart(t), vals)
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	return r.(*releasev1.Release)
}

func upgrade(t *testing.T, vals map[string]any) *releasev1.Release {
	t.Helper()
	up := action.NewUpgrade(helmConfig(t))
	up.Namespace = releaseNamespace
	up.WaitStrategy = kube.HookOnlyStrategy
	up.Timeout = time.Minute
	r, err := up.RunWithContext(ctx(t), releaseName, loadChart(t), vals)
	if err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	return r.(*releasev1.Release)
}

// uninstall runs `helm uninstall` and returns what Helm reports it kept.
func uninstall(t *testing.T) string {
	t.Helper()
	un := action.NewUninstall(helmConfig(t))
	un.WaitStrategy = kube.HookOnlyStrategy
	un.Timeout = time.Minute
	res, err := un.Run(releaseName)
	if err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	return res.Info
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}
