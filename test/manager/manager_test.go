// Package manager_test runs the manager binary against a real control plane
// the way users start it: with --kubeconfig, and, as config/default deploys
// it, under its own ServiceAccount with leader election and authenticated
// metrics (a TokenReview and a SubjectAccessReview per scraper, as
// kubebuilder's filter does).
package manager_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"

	"github.com/mcpbridge/operator/internal/testenv"
)

var (
	env        *testenv.Env
	managerBin string
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "mcpbridge-manager-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	managerBin = filepath.Join(dir, "manager")
	if err := testenv.Build(managerBin, "./cmd/manager"); err != nil {
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
	return m.Run()
}

// TestMetricsAsDeployed applies config/default's RBAC, then runs the manager
// with config/default's arguments (loopback addresses instead of the pod's)
// and a kubeconfig holding only its ServiceAccount's token: the manager must
// lead, and serve /metrics only to a token whose user may GET it.
func TestMetricsAsDeployed(t *testing.T) {
	g := NewWithT(t)
	metrics, probes := freeAddr(t), freeAddr(t)
	objs, ns, args := deployedManager(t, metrics, probes, freeAddr(t))
	args = append(args, "--replica-name=manager-as-deployed")
	logPath := startManager(t, probes, args...)

	// Every replica keeps a Lease of its own, with nothing but
	// config/default's RBAC.
	g.Eventually(func() string {
		var lease coordinationv1.Lease
		key := types.NamespacedName{Namespace: ns, Name: "mcpbridge-replica-manager-as-deployed"}
		if err := env.Client.Get(ctx(t), key, &lease); err != nil || lease.Spec.HolderIdentity == nil {
			return ""
		}
		return *lease.Spec.HolderIdentity
	}, time.Minute, 100*time.Millisecond).Should(Equal("manager-as-deployed"), "the manager never took its replica Lease")

	// Leading takes the Lease, with nothing but config/default's RBAC.
	g.Eventually(func() string {
		var lease coordinationv1.Lease
		key := types.NamespacedName{Namespace: ns, Name: "mcpbridge-manager.mcpbridge.dev"}
		if err := env.Client.Get(ctx(t), key, &lease); err != nil || lease.Spec.HolderIdentity == nil {
			return ""
		}
		return *lease.Spec.HolderIdentity
	}, time.Minute, 100*time.Millisecond).ShouldNot(BeEmpty(), "the manager never took the leader election Lease")

	reader := clusterRole(t, objs, "metrics-reader")
	for _, name := range []string{"scraper", "stranger"} {
		_, _, err := env.Kubectl(ctx(t), "-n", ns, "create", "serviceaccount", name)
		g.Expect(err).NotTo(HaveOccurred())
	}
	_, _, err := env.Kubectl(ctx(t), "create", "clusterrolebinding", "scraper-metrics",
		"--clusterrole="+reader, "--serviceaccount="+ns+":scraper")
	g.Expect(err).NotTo(HaveOccurred())

	url := "https://" + metrics + "/metrics"
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		// The manager's own self-signed certificate (no --metrics-cert-path).
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see above
		ForceAttemptHTTP2: true,
	}}
	status := func(token string) func() (int, error) {
		return func() (int, error) {
			code, _, _, err := get(hc, url, token)
			return code, err
		}
	}
	g.Eventually(status(""), 30*time.Second, 100*time.Millisecond).Should(Equal(http.StatusUnauthorized), "no token")
	g.Expect(status("not-a-token")()).To(Equal(http.StatusUnauthorized), "a token the apiserver does not know")
	// Refusing a caller costs no log line: unauthenticated callers cannot
	// fill the manager's log.
	for i := range 20 {
		g.Expect(status(fmt.Sprintf("garbage-%d", i))()).To(Equal(http.StatusUnauthorized))
	}
	managerLog, err := os.ReadFile(logPath)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(managerLog)).NotTo(ContainSubstring("garbage"))
	g.Expect(string(managerLog)).NotTo(MatchRegexp(`(?i)authenticat`), "a log line about refused tokens")
	g.Expect(status(createToken(t, ns, "stranger"))()).To(Equal(http.StatusForbidden), "a token without metrics-reader")

	// The apiserver's authorizer learns of the binding from its informers.
	scraper := createToken(t, ns, "scraper")
	var body, proto string
	g.Eventually(func(g Gomega) {
		var code int
		var err error
		code, body, proto, err = get(hc, url, scraper)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusOK), "a token bound to %s: %s", reader, body)
	}, time.Minute, 200*time.Millisecond).Should(Succeed())
	g.Expect(body).To(ContainSubstring("controller_runtime_"))
	// --enable-http2 is off: offered h2, the server still speaks HTTP/1.1.
	g.Expect(proto).To(Equal("HTTP/1.1"))

	resp, err := http.Get("http://" + metrics + "/metrics")
	g.Expect(err).NotTo(HaveOccurred())
	resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest), "plain HTTP to the HTTPS metrics port")
}

// TestMetricsCertificateRotates serves the metrics with a certificate from
// --metrics-cert-path and replaces it on disk: the new one is served
// without a restart.
func TestMetricsCertificateRotates(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	roots := x509.NewCertPool()
	serial := func() string { return writeCert(t, dir, roots, "cert.pem", "key.pem") }
	first := serial()

	metrics, probes := freeAddr(t), freeAddr(t)
	startManager(t, probes, "--kubeconfig="+env.KubeconfigPath, "--metrics-bind-address="+metrics,
		"--metrics-cert-path="+dir, "--metrics-cert-name=cert.pem", "--metrics-cert-key=key.pem",
		"--gateway-bind-address="+freeAddr(t), "--gateway-tls=false", "--health-probe-bind-address="+probes)

	served := servedSerial(metrics, roots)
	g.Eventually(served, 30*time.Second, 100*time.Millisecond).Should(Equal(first))
	second := serial()
	g.Expect(second).NotTo(Equal(first))
	g.Eventually(served, 30*time.Second, 100*time.Millisecond).Should(Equal(second), "the rotated certificate is not served")
}

// TestGatewayServesTLSAndRotates serves the gateway with a certificate from
// --gateway-cert-dir and replaces it on disk: the new one is served without
// a restart, over TLS only and HTTP/1.1 only.
func TestGatewayServesTLSAndRotates(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	roots := x509.NewCertPool()
	serial := func() string { return writeCert(t, dir, roots, "tls.crt", "tls.key") }
	first := serial()

	gw, probes := freeAddr(t), freeAddr(t)
	startManager(t, probes, "--kubeconfig="+env.KubeconfigPath, "--metrics-bind-address=0",
		"--gateway-bind-address="+gw, "--gateway-auth=none", "--gateway-cert-dir="+dir, "--health-probe-bind-address="+probes)

	served := servedSerial(gw, roots)
	g.Eventually(served, 30*time.Second, 100*time.Millisecond).Should(Equal(first))

	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}}
	defer hc.CloseIdleConnections()
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`
	post := func(scheme string) (int, string, error) {
		req, err := http.NewRequest(http.MethodPost, scheme+"://"+gw+"/namespaces/default/mcp", strings.NewReader(initialize))
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, resp.Proto, nil
	}
	code, proto, err := post("https")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusOK), "initialize over HTTPS")
	g.Expect(proto).To(Equal("HTTP/1.1"))
	code, _, err = post("http")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusBadRequest), "plain HTTP to the HTTPS gateway")

	second := serial()
	g.Expect(second).NotTo(Equal(first))
	g.Eventually(served, 30*time.Second, 100*time.Millisecond).Should(Equal(second), "the rotated certificate is not served")
}

// TestPlainMetrics is what `make demo` and the benchmarks use:
// --metrics-secure=false serves plain HTTP to anyone.
func TestPlainMetrics(t *testing.T) {
	g := NewWithT(t)
	metrics, probes := freeAddr(t), freeAddr(t)
	startManager(t, probes, "--kubeconfig="+env.KubeconfigPath, "--metrics-secure=false",
		"--metrics-bind-address="+metrics, "--gateway-bind-address="+freeAddr(t), "--gateway-tls=false", "--health-probe-bind-address="+probes)
	hc := &http.Client{Timeout: 10 * time.Second}
	g.Eventually(func() (int, error) {
		code, _, _, err := get(hc, "http://"+metrics+"/metrics", "")
		return code, err
	}, 30*time.Second, 100*time.Millisecond).Should(Equal(http.StatusOK))
}

// deployedManager applies config/default's objects but its Deployment (no
// kubelet would run it) and returns them, the manager's namespace and
// config/default's arguments with loopback addresses instead of the pod's,
// and what a Pod knows but a process outside one does not: its namespace,
// and its ServiceAccount's token (in a kubeconfig of its own).
func deployedManager(t *testing.T, metrics, probes, gateway string) (objs []*unstructured.Unstructured, ns string, args []string) {
	t.Helper()
	g := NewWithT(t)
	root, err := testenv.ModuleRoot()
	g.Expect(err).NotTo(HaveOccurred())
	objs, err = env.Kustomize(ctx(t), filepath.Join(root, "config", "default"))
	g.Expect(err).NotTo(HaveOccurred())
	d, err := testenv.ManagerDeployment(objs)
	g.Expect(err).NotTo(HaveOccurred())
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			_, err := env.Apply(ctx(t), o, "--server-side")
			g.Expect(err).NotTo(HaveOccurred())
		}
	}
	ns, sa := d.Namespace, d.Spec.Template.Spec.ServiceAccountName
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		switch {
		case strings.HasPrefix(a, "--metrics-bind-address="):
			a = "--metrics-bind-address=" + metrics
		case strings.HasPrefix(a, "--health-probe-bind-address="):
			a = "--health-probe-bind-address=" + probes
		case strings.HasPrefix(a, "--gateway-bind-address="):
			a = "--gateway-bind-address=" + gateway
		}
		args = append(args, a)
	}
	args = append(args, "--leader-election-namespace="+ns, "--manager-namespace="+ns, "--kubeconfig="+tokenKubeconfig(t, ns, sa))
	return objs, ns, args
}

// startManager runs the manager binary with args and waits for its
// readiness probe, and returns the path of its log. $KUBECONFIG names a
// file that does not exist, so the manager reaches the control plane only
// through --kubeconfig. The manager is stopped, and its log shown on
// failure, when the test ends.
func startManager(t *testing.T, probes string, args ...string) string {
	t.Helper()
	return runManager(t, probes, args...).logPath
}

// managerProcess is one manager binary the test started.
type managerProcess struct {
	cmd     *exec.Cmd
	logPath string
	exited  chan error
	ended   chan struct{} // closed when the process has exited
	done    bool
	// signalled: terminate sent SIGTERM; a second one would make the
	// manager exit at once.
	signalled bool
}

// terminate sends SIGTERM without waiting; stop then only waits.
func (p *managerProcess) terminate() error {
	p.signalled = true
	return p.cmd.Process.Signal(syscall.SIGTERM)
}

// running reports whether the process has not exited yet.
func (p *managerProcess) running() bool {
	select {
	case <-p.ended:
		return false
	default:
		return true
	}
}

// stop sends sig and waits for the process to end; it returns how it
// exited.
func (p *managerProcess) stop(sig syscall.Signal) error {
	if p.done {
		return nil
	}
	p.done = true
	if !p.signalled || sig != syscall.SIGTERM {
		_ = p.cmd.Process.Signal(sig)
	}
	select {
	case err := <-p.exited:
		return err
	case <-time.After(40 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("the manager did not stop within 40s of %v", sig)
	}
}

// runManager is startManager, returning the process.
func runManager(t *testing.T, probes string, args ...string) *managerProcess {
	t.Helper()
	dir := t.TempDir()
	logPath := filepath.Join(dir, "manager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(managerBin, ownReplicaAddress(t, args)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(dir, "no-such-kubeconfig"), "HOME="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &managerProcess{cmd: cmd, logPath: logPath, exited: make(chan error, 1), ended: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		close(p.ended)
		p.exited <- err
	}()
	t.Cleanup(func() {
		if err := p.stop(syscall.SIGTERM); err != nil {
			t.Errorf("the manager exited with %v on SIGTERM", err)
		}
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("manager %s\n%s", strings.Join(args, " "), b)
		}
	})

	hc := &http.Client{Timeout: time.Second}
	NewWithT(t).Eventually(func(g Gomega) {
		select {
		case err := <-p.exited:
			p.exited <- err
			StopTrying(fmt.Sprintf("the manager exited at start-up: %v", err)).Now()
		default:
		}
		code, _, _, err := get(hc, "http://"+probes+"/readyz", "")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusOK))
	}, time.Minute, 100*time.Millisecond).Should(Succeed(), "the manager is not ready")
	return p
}

// tokenKubeconfig writes a kubeconfig that reaches the control plane with a
// token of ServiceAccount ns/sa only.
func tokenKubeconfig(t *testing.T, ns, sa string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	kc.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: createToken(t, ns, sa)}
	kc.Contexts["manager"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: sa}
	kc.CurrentContext = "manager"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func createToken(t *testing.T, ns, sa string) string {
	t.Helper()
	out, _, err := env.Kubectl(ctx(t), "-n", ns, "create", "token", sa, "--duration=1h")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// clusterRole is the name config/default gives the ClusterRole whose name
// ends in suffix.
func clusterRole(t *testing.T, objs []*unstructured.Unstructured, suffix string) string {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" && strings.HasSuffix(o.GetName(), suffix) {
			return o.GetName()
		}
	}
	t.Fatalf("config/default has no ClusterRole *%s", suffix)
	return ""
}

// writeCert writes a new certificate for 127.0.0.1, signed by a new CA that
// roots learns, to dir/certName and dir/keyName, and returns its serial.
func writeCert(t *testing.T, dir string, roots *x509.CertPool, certName, keyName string) string {
	t.Helper()
	crt, key, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The bundle is the serving certificate, then the CA that signed it.
	var certs []*x509.Certificate
	for rest := crt; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		certs = append(certs, c)
	}
	if len(certs) != 2 {
		t.Fatalf("want a certificate and its CA, got %d certificates", len(certs))
	}
	roots.AddCert(certs[1])
	// Key first: the watcher reloads on either file's change and needs a pair.
	for _, f := range []struct {
		name string
		data []byte
	}{{keyName, key}, {certName, crt}} {
		tmp := filepath.Join(dir, "."+f.name)
		if err := os.WriteFile(tmp, f.data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, f.name)); err != nil {
			t.Fatal(err)
		}
	}
	return certs[0].SerialNumber.String()
}

// servedSerial returns the serial number of the certificate served at
// addr, which roots must trust for 127.0.0.1.
func servedSerial(addr string, roots *x509.CertPool) func() (string, error) {
	return func() (string, error) {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
		if err != nil {
			return "", err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
	}
}

// get returns the status, body and protocol of a GET, with a bearer token
// unless it is empty.
func get(hc *http.Client, url, token string) (int, string, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Proto, err
}

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := testenv.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// ownReplicaAddress gives the manager a replicas' endpoint on a free
// loopback port unless args choose one, in place of config/default's :8091
// or the flag's default: managers of tests that run at once must not share
// one.
func ownReplicaAddress(t *testing.T, args []string) []string {
	out := make([]string, 0, len(args)+1)
	for _, a := range args {
		if strings.HasPrefix(a, "--replica-bind-address=") && !strings.HasPrefix(a, "--replica-bind-address=:") {
			return args // the test's own
		}
		if !strings.HasPrefix(a, "--replica-bind-address=") {
			out = append(out, a)
		}
	}
	return append(out, "--replica-bind-address="+freeAddr(t))
}
