package testenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

// ModulePath is the import path of the module whose root Start looks for.
const ModulePath = "github.com/mcpbridge/operator"

// binaries are the control-plane executables envtest needs; kubectl is used
// by Env.Kubectl.
var binaries = []string{"kube-apiserver", "etcd", "kubectl"}

// Env is a running control plane with the operator's CRDs installed.
type Env struct {
	// Environment is the underlying envtest environment.
	Environment *envtest.Environment
	// Config talks to the apiserver as an admin (system:masters).
	Config *rest.Config
	// Client uses Scheme (client-go's types plus mcpbridge.dev/v1alpha1).
	Client client.Client
	// Scheme is the operator's scheme.
	Scheme *k8sruntime.Scheme
	// KubeconfigPath is a kubeconfig file for Config, in a temporary
	// directory that Stop removes.
	KubeconfigPath string
	// KubectlPath is the kubectl binary next to the control plane's.
	KubectlPath string

	tmpDir string
}

// NewScheme returns the operator's scheme: client-go's built-in types plus
// mcpbridge.dev/v1alpha1.
func NewScheme() (*k8sruntime.Scheme, error) {
	s := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("adding client-go types to the scheme: %w", err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("adding %s to the scheme: %w", v1alpha1.GroupVersion, err)
	}
	return s, nil
}

// Start starts envtest with the CRDs from config/crd/bases (found relative to
// the module root; a missing directory is an error), and returns the
// environment with an admin client and a kubeconfig file for kubectl.
//
// The control-plane binaries come from KUBEBUILDER_ASSETS, or, when it is
// unset, from <module root>/bin/k8s. If neither holds them, Start returns an
// error that says to run `make envtest`.
func Start() (*Env, error) {
	root, err := ModuleRoot()
	if err != nil {
		return nil, err
	}
	assets, err := assetsDir(root)
	if err != nil {
		return nil, err
	}
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}

	env := &envtest.Environment{
		Scheme:                scheme,
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	// Paths set explicitly win over KUBEBUILDER_ASSETS inside envtest, so the
	// directory validated above is the one that runs.
	env.ControlPlane.GetAPIServer().Path = filepath.Join(assets, "kube-apiserver")
	env.ControlPlane.Etcd = &envtest.Etcd{Path: filepath.Join(assets, "etcd")}
	env.ControlPlane.KubectlPath = filepath.Join(assets, "kubectl")

	cfg, err := env.Start()
	if err != nil {
		// Start may fail after the processes are up (CRD install); do not
		// leave an apiserver and etcd behind.
		stopErr := env.Stop()
		return nil, errors.Join(fmt.Errorf("starting envtest with binaries from %s: %w", assets, err), stopErr)
	}

	e := &Env{Environment: env, Config: cfg, Scheme: scheme, KubectlPath: env.ControlPlane.KubectlPath}
	fail := func(err error) (*Env, error) {
		return nil, errors.Join(err, e.Stop())
	}

	e.Client, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fail(fmt.Errorf("creating a client: %w", err))
	}

	e.tmpDir, err = os.MkdirTemp("", "mcpbridge-testenv-")
	if err != nil {
		return fail(fmt.Errorf("creating a directory for the kubeconfig: %w", err))
	}
	e.KubeconfigPath = filepath.Join(e.tmpDir, "kubeconfig")
	if err := os.WriteFile(e.KubeconfigPath, env.KubeConfig, 0o600); err != nil {
		return fail(fmt.Errorf("writing the kubeconfig: %w", err))
	}
	return e, nil
}

// Stop stops the control plane and removes the kubeconfig file. It is safe
// to call on a nil Env and more than once.
func (e *Env) Stop() error {
	if e == nil {
		return nil
	}
	var errs []error
	if e.Environment != nil {
		if err := e.Environment.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping envtest: %w", err))
		}
		e.Environment = nil
	}
	if e.tmpDir != "" {
		if err := os.RemoveAll(e.tmpDir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", e.tmpDir, err))
		}
		e.tmpDir = ""
	}
	return errors.Join(errs...)
}

// Kubectl runs the control plane's kubectl with --kubeconfig pointing at this
// environment. A non-zero exit is returned as an error that includes stderr.
func (e *Env) Kubectl(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	var outBuf, errBuf bytes.Buffer
	cmd := exec.CommandContext(ctx, e.KubectlPath, append([]string{"--kubeconfig=" + e.KubeconfigPath}, args...)...)
	cmd.Stdout = &outBuf
	cmd.Stderr = &errBuf
	// Keep the developer's own kubectl configuration out of the way.
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.KubeconfigPath)
	err = cmd.Run()
	stdout, stderr = outBuf.String(), errBuf.String()
	if err != nil {
		err = fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr))
	}
	return stdout, stderr, err
}

// ModuleRoot returns the directory of the go.mod of module ModulePath,
// walking up from the working directory (go test runs in the package's
// directory), then from this source file's directory.
func ModuleRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for {
			if isModuleRoot(dir) {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("no go.mod of module %s found above %s", ModulePath, strings.Join(starts, " or "))
}

func isModuleRoot(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == ModulePath
		}
	}
	return false
}

// assetsDir picks the directory holding the control-plane binaries.
func assetsDir(root string) (string, error) {
	const hint = "run `make envtest` to build them into bin/k8s"
	if dir, ok := os.LookupEnv("KUBEBUILDER_ASSETS"); ok && dir != "" {
		if missing := missingBinaries(dir); len(missing) > 0 {
			return "", fmt.Errorf("KUBEBUILDER_ASSETS=%s lacks %s; %s", dir, strings.Join(missing, ", "), hint)
		}
		return dir, nil
	}
	dir := filepath.Join(root, "bin", "k8s")
	if missing := missingBinaries(dir); len(missing) > 0 {
		return "", fmt.Errorf("KUBEBUILDER_ASSETS is unset and %s lacks %s; %s", dir, strings.Join(missing, ", "), hint)
	}
	return dir, nil
}

func missingBinaries(dir string) []string {
	var missing []string
	for _, b := range binaries {
		fi, err := os.Stat(filepath.Join(dir, b))
		if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	return missing
}
