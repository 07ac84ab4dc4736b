// Command chart-release installs and uninstalls a release of a chart with the
// Helm SDK, as `helm install` and `helm uninstall` do with the same options.
// The e2e suite (test/e2e) runs it on the real node of `make test-e2e`, where
// no helm binary exists; hack/e2e.sh builds it into bin/chart-release. It
// lives in the chart tests' module because the Helm SDK, with its some 60
// modules, must not become a dependency of the operator's module.
//
// Usage:
//
//	chart-release install -kubeconfig FILE -namespace NS [-values FILE] NAME CHART
//	chart-release uninstall -kubeconfig FILE -namespace NS NAME
//
// install prints the release's manifest and waits for nothing (the caller
// checks what it expects); uninstall prints what Helm kept. Releases are
// stored in Secrets in NS, as the helm CLI stores them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/yaml"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "chart-release:", err)
		os.Exit(1)
	}
}

type options struct {
	kubeconfig, namespace, values string
	timeout                       time.Duration
}

func run(args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: chart-release install|uninstall -kubeconfig FILE -namespace NS [-values FILE] NAME [CHART]")
	}
	var o options
	fs := flag.NewFlagSet("chart-release "+args[0], flag.ContinueOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "the cluster's kubeconfig (required)")
	fs.StringVar(&o.namespace, "namespace", "", "the release's namespace, which must exist (required)")
	fs.StringVar(&o.values, "values", "", "a YAML or JSON file of values over the chart's values.yaml (install)")
	fs.DurationVar(&o.timeout, "timeout", 3*time.Minute, "how long the apiserver calls may take")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if o.kubeconfig == "" || o.namespace == "" {
		return errors.New("-kubeconfig and -namespace are required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	switch {
	case args[0] == "install" && fs.NArg() == 2:
		return install(ctx, o, fs.Arg(0), fs.Arg(1), out)
	case args[0] == "uninstall" && fs.NArg() == 1:
		return uninstall(o, fs.Arg(0), out)
	}
	return fmt.Errorf("usage: chart-release install ... NAME CHART | uninstall ... NAME (got %q)", args)
}

func install(ctx context.Context, o options, name, chartDir string, out io.Writer) error {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return fmt.Errorf("loading %s: %w", chartDir, err)
	}
	vals := map[string]any{}
	if o.values != "" {
		b, err := os.ReadFile(o.values)
		if err != nil {
			return err
		}
		if err := yaml.Unmarshal(b, &vals); err != nil {
			return fmt.Errorf("%s: %w", o.values, err)
		}
	}
	cfg, done, err := configuration(o)
	if err != nil {
		return err
	}
	defer done()
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace = name, o.namespace
	inst.WaitStrategy = kube.HookOnlyStrategy
	inst.Timeout = o.timeout
	r, err := inst.RunWithContext(ctx, ch, vals)
	if err != nil {
		return fmt.Errorf("helm install %s: %w", name, err)
	}
	_, err = io.WriteString(out, r.(*releasev1.Release).Manifest)
	return err
}

func uninstall(o options, name string, out io.Writer) error {
	cfg, done, err := configuration(o)
	if err != nil {
		return err
	}
	defer done()
	un := action.NewUninstall(cfg)
	un.WaitStrategy = kube.HookOnlyStrategy
	un.Timeout = o.timeout
	res, err := un.Run(name)
	if err != nil {
		return fmt.Errorf("helm uninstall %s: %w", name, err)
	}
	_, err = fmt.Fprintln(out, res.Info)
	return err
}

// configuration is Helm's action configuration for the cluster, with the
// discovery cache in a temporary directory that done removes: the default,
// $HOME/.kube/cache, would outlive a run in hack/e2e-sandbox.sh.
func configuration(o options) (cfg *action.Configuration, done func(), err error) {
	cache, err := os.MkdirTemp("", "chart-release-")
	if err != nil {
		return nil, nil, err
	}
	done = func() { _ = os.RemoveAll(cache) }
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace, flags.CacheDir = &o.kubeconfig, &o.namespace, &cache
	cfg = action.NewConfiguration(action.ConfigurationSetLogger(slog.NewTextHandler(os.Stderr, nil)))
	if err := cfg.Init(flags, o.namespace, "secret"); err != nil {
		done()
		return nil, nil, err
	}
	return cfg, done, nil
}
