package testcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/internal/testenv"
)

// Cluster is a running single-node cluster.
type Cluster struct {
	// NodeIP is the node's InternalIP (and hostNetwork Pods' IP).
	NodeIP net.IP
	// Config talks to the apiserver as an admin (system:masters).
	Config *rest.Config
	// Client uses the operator's scheme; Clientset is client-go's.
	Client    client.Client
	Clientset kubernetes.Interface
	// KubeconfigPath is an admin kubeconfig for kubectl.
	KubeconfigPath string
	// ContainerdSocket is containerd's gRPC socket (for ctr).
	ContainerdSocket string
	// LogDir holds one log file per component; it outlives the sandbox.
	LogDir string

	root, state string
	pki         *pki
	procs       []*process
}

// requiredBinaries are checked before anything starts.
var requiredBinaries = []string{
	"k8s/etcd", "k8s/kube-apiserver", "k8s/kubectl",
	"node/kube-controller-manager", "node/kube-scheduler", "node/kubelet",
	"node/containerd", "node/containerd-shim-runc-v2", "node/ctr", "node/runc",
	"node/cni/bridge", "node/cni/host-local", "node/cni/loopback", "images/pause.tar",
}

// Start brings up the control plane and the node and waits until the node
// is Ready and the default ServiceAccount and kube-root-ca.crt exist. It
// refuses to run outside hack/e2e-sandbox.sh. On error nothing is left
// running.
func Start(ctx context.Context) (*Cluster, error) {
	sb, err := checkSandbox()
	if err != nil {
		return nil, err
	}
	root, err := testenv.ModuleRoot()
	if err != nil {
		return nil, err
	}
	for _, b := range requiredBinaries {
		if _, err := os.Stat(filepath.Join(root, "bin", b)); err != nil {
			return nil, fmt.Errorf("bin/%s is missing: build the node with hack/build-node.sh and the images with make image (make test-e2e does both)", b)
		}
	}
	c := &Cluster{NodeIP: sb.nodeIP, root: root, state: sb.state, LogDir: logDir(root)}
	c.ContainerdSocket = c.path("containerd", "containerd.sock")
	if err := c.start0(ctx); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	return c, nil
}

// logDir is where components log: outside the sandbox's tmpfs, so that a
// failed run can be read afterwards.
func logDir(root string) string {
	if d := os.Getenv("MCPBRIDGE_E2E_LOGS"); d != "" {
		return d
	}
	return filepath.Join(root, "bin", "e2e-logs")
}

func (c *Cluster) start0(ctx context.Context) error {
	if err := os.MkdirAll(c.LogDir, 0o755); err != nil {
		return err
	}
	var err error
	if c.pki, err = newPKI(c.path("pki"), NodeName, serverIPs(c.NodeIP)); err != nil {
		return err
	}
	if err := c.connect(); err != nil {
		return err
	}
	steps := []func(context.Context) error{
		c.step(c.startEtcd), c.waitEtcd,
		c.step(c.startAPIServer), c.waitAPIServer,
		c.step(c.startControllerManager), c.step(c.startScheduler),
		c.step(c.startContainerd), c.waitContainerd,
		c.importPause,
		c.step(c.startKubelet), c.waitNodeReady, c.waitServiceAccounts,
	}
	for _, s := range steps {
		if err := s(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) step(f func() error) func(context.Context) error {
	return func(context.Context) error { return f() }
}

// connect writes the admin kubeconfig and builds the clients.
func (c *Cluster) connect() error {
	var err error
	if c.KubeconfigPath, err = c.writeKubeconfig("admin", c.pki.admin); err != nil {
		return err
	}
	c.Config = &rest.Config{
		Host: apiServerURL("127.0.0.1"),
		TLSClientConfig: rest.TLSClientConfig{
			CAData: c.pki.ca.cert, CertData: c.pki.admin.cert, KeyData: c.pki.admin.key,
		},
		QPS: 100, Burst: 200,
	}
	scheme, err := testenv.NewScheme()
	if err != nil {
		return err
	}
	if c.Client, err = client.New(c.Config, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	c.Clientset, err = kubernetes.NewForConfig(c.Config)
	return err
}

// Stop stops every component (kubelet first), kills what outlives them
// (shims, containers), and unmounts and removes the node's state. It is
// safe to call on a nil Cluster and more than once.
func (c *Cluster) Stop() error {
	if c == nil {
		return nil
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].stop(10 * time.Second)
	}
	c.procs = nil
	errs := []error{killOthers()}
	errs = append(errs, unmountUnder(c.state))
	if entries, err := os.ReadDir(c.state); err == nil {
		for _, e := range entries {
			errs = append(errs, os.RemoveAll(filepath.Join(c.state, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// ImportImage loads an image tarball (make image) into the node's
// containerd, where kubelet finds it (imagePullPolicy Never or IfNotPresent).
func (c *Cluster) ImportImage(ctx context.Context, tarball string) error {
	out, err := exec.CommandContext(ctx, c.bin("node", "ctr"), "--address", c.ContainerdSocket,
		"--namespace", "k8s.io", "images", "import", "--snapshotter", "overlayfs", tarball).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s: %w: %s", tarball, err, bytes.TrimSpace(out))
	}
	return nil
}

// Kubectl runs bin/k8s/kubectl as the admin and returns its standard output.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, c.bin("k8s", "kubectl"), append([]string{"--kubeconfig=" + c.KubeconfigPath}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// kubectl's discovery cache would go to $HOME/.kube otherwise.
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.KubeconfigPath, "KUBECACHEDIR="+c.path("kubectl-cache"))
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Image is the path of bin/images/NAME.tar.
func (c *Cluster) Image(name string) string {
	return filepath.Join(c.root, "bin", "images", name+".tar")
}

// Root is the module's root directory.
func (c *Cluster) Root() string { return c.root }
