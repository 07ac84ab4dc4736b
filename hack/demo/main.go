// Command demo is `make demo`: the operator on a local control plane with the
// sample McpServers. It builds what it needs, starts etcd and kube-apiserver
// (envtest) with their state under .demo/, installs the CRDs, runs the
// manager and a Streamable HTTP fixture as child processes, applies
// config/samples, waits for every server to be Ready, kills one stdio server
// to show the reconnect, lists and calls tools through the MCP gateway as an
// agent would, and then waits for Ctrl-C. Whatever it started is
// stopped on the way out; `make demo-down` cleans up after a killed demo
// using the pid files it leaves in .demo/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/mcpbridge/operator/internal/testenv"
)

// demo holds what one run started, so that stop can undo exactly that.
type demo struct {
	root, dir         string // repository root; state directory (.demo)
	kubectlPath       string
	kubeconfig        string
	gateway           string // the manager's gateway address
	readyTimeout      time.Duration
	exitAfterRecovery bool
	out               io.Writer

	env     *envtest.Environment
	client  client.Client
	fixture *child // the Streamable HTTP fixture
	manager *child
	failed  bool
	ownsDir bool // prepareDir made the state directory for this run
}

func main() {
	os.Exit(run())
}

func run() int {
	root, err := testenv.ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	d := &demo{root: root, out: os.Stdout}
	flag.StringVar(&d.dir, "dir", filepath.Join(root, ".demo"), "state directory: control-plane data, kubeconfig, logs and pid files")
	flag.BoolVar(&d.exitAfterRecovery, "exit-after-recovery", os.Getenv("DEMO_EXIT_AFTER_RECOVERY") == "1",
		"stop everything and exit after the recovery and gateway steps (also DEMO_EXIT_AFTER_RECOVERY=1)")
	flag.DurationVar(&d.readyTimeout, "ready-timeout", 2*time.Minute, "how long to wait for the samples to become Ready")
	flag.Parse()
	if d.dir, err = filepath.Abs(d.dir); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	d.kubectlPath = filepath.Join(root, "bin", "k8s", "kubectl")
	d.kubeconfig = filepath.Join(d.dir, "kubeconfig")

	// Children run in their own process groups, so a terminal's Ctrl-C
	// reaches only this process, which then stops them in order: the
	// manager first, while the apiserver can still take its last writes.
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	err = d.start(ctx)
	interrupted := ctx.Err() != nil
	if err != nil && !interrupted {
		d.failed = true
		fmt.Fprintln(os.Stderr, "demo: error:", err)
	}
	if stopErr := d.stop(); stopErr != nil {
		d.failed = true
		fmt.Fprintln(os.Stderr, "demo: error while stopping:", stopErr)
	}
	switch {
	case d.failed:
		return 1
	case err != nil && interrupted: // stopped before the demo was up
		return 130
	}
	return 0
}

// start runs the demo up to the point where it waits for Ctrl-C (or, with
// --exit-after-recovery, up to the gateway step that follows the recovery).
func (d *demo) start(ctx context.Context) error {
	begin := time.Now()
	if err := prepareDir(d.dir); err != nil {
		return err
	}
	d.ownsDir = true
	d.say("Building the control plane, the fixture server and the manager (cached after the first run)")
	if err := d.build(ctx); err != nil {
		return err
	}

	d.say("Starting etcd and kube-apiserver under %s and installing the CRDs", d.rel(d.dir))
	if err := d.startControlPlane(); err != nil {
		return err
	}

	url, err := d.startHTTPFixture()
	if err != nil {
		return err
	}
	d.say("Streamable HTTP fixture serving %s", url)

	if err := d.startManager(ctx); err != nil {
		return err
	}

	samples, err := d.applySamples(ctx, url)
	if err != nil {
		return err
	}
	if err := d.waitReady(ctx, samples); err != nil {
		return err
	}
	d.say("Every sample is Ready (%s since start):", time.Since(begin).Round(100*time.Millisecond))
	if err := d.printTable(ctx); err != nil {
		return err
	}

	if err := d.killAndRecover(ctx, samples); err != nil {
		return err
	}
	if err := d.useGateway(ctx, samples); err != nil {
		return err
	}
	if d.exitAfterRecovery {
		return nil
	}

	env := "KUBECONFIG=" + d.rel(d.kubeconfig)
	d.say("The demo keeps running. From %s, explore it with:", d.root)
	fmt.Fprintf(d.out, "    %s %s get mcpservers -o wide\n", env, d.rel(d.kubectlPath))
	fmt.Fprintf(d.out, "    %s %s describe mcpserver %s\n", env, d.rel(d.kubectlPath), samples.stdioFixture)
	fmt.Fprintf(d.out, "    MCP gateway (no auth, loopback only): http://%s/namespaces/%s/mcp\n", d.gateway, namespace)
	fmt.Fprintln(d.out, "    (on a cluster, an agent's token is made with: kubectl create token SA --audience mcpbridge.dev)")
	fmt.Fprintf(d.out, "    Manager log: %s\n", d.rel(d.manager.logPath))
	d.say("Press Ctrl-C to stop everything (or run `make demo-down` from another terminal).")
	select {
	case <-ctx.Done():
		return nil
	case <-d.manager.Done():
		return fmt.Errorf("the manager exited: %v; see %s", d.manager.Err(), d.rel(d.manager.logPath))
	}
}

// stop undoes whatever start got to, manager first: on SIGTERM it disposes
// its MCP server children, and it still needs the apiserver to release its
// connections cleanly.
func (d *demo) stop() error {
	if !d.ownsDir {
		return nil // the directory belongs to another demo, or none was made
	}
	begin := time.Now()
	if d.manager != nil || d.fixture != nil || d.env != nil {
		d.say("Stopping the manager, the HTTP fixture and the control plane")
	}
	var errs []error
	if d.manager != nil {
		errs = append(errs, d.stopManager())
	}
	if d.fixture != nil {
		errs = append(errs, d.fixture.stop(5*time.Second))
	}
	if d.env != nil {
		if err := d.env.Stop(); err != nil {
			errs = append(errs, err)
		} else {
			os.Remove(filepath.Join(d.dir, "etcd.pid"))
			os.Remove(filepath.Join(d.dir, "kube-apiserver.pid"))
		}
	}
	err := errors.Join(errs...)
	if err != nil || d.failed {
		// Logs help with the failure; `make demo-down` removes them.
		fmt.Fprintf(os.Stderr, "demo: logs kept in %s; `make demo-down` removes them\n", d.rel(d.dir))
		return err
	}
	if err := os.RemoveAll(d.dir); err != nil {
		return err
	}
	d.say("Stopped in %s; nothing is left running and %s is removed.", time.Since(begin).Round(100*time.Millisecond), d.rel(d.dir))
	return nil
}

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "==> "+format+"\n", args...)
}

// rel shortens paths under the working directory (the repository root for
// `make demo`) so that the printed commands stay readable.
func (d *demo) rel(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	if r, err := filepath.Rel(wd, path); err == nil && filepath.IsLocal(r) {
		return r
	}
	return path
}
