package shim

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/mcpbridge/operator/internal/shim/tunnel"
)

// Tests of the shim in this process; process-level behaviour (reaping as
// a subreaper, signals to the shim) is in process_test.go.

func TestTunnelCarriesBytesUnchanged(t *testing.T) {
	g := NewWithT(t)
	addr := serveInProcess(t, Config{Command: []string{"cat"}})
	tun := dialOK(t, addr)

	// Every byte value, newlines and NULs included, in uneven writes, read
	// back while stdin is still open: both directions stream at once.
	rng := rand.New(rand.NewPCG(1, 2))
	want := make([]byte, 200_000)
	for i := range want {
		want[i] = byte(rng.IntN(256))
	}
	got := make([]byte, len(want))
	for off := 0; off < len(want); {
		n := min(1+rng.IntN(8000), len(want)-off)
		_, err := tun.Stdin().Write(want[off : off+n])
		g.Expect(err).NotTo(HaveOccurred())
		_, err = io.ReadFull(tun.Stdout(), got[off:off+n])
		g.Expect(err).NotTo(HaveOccurred())
		off += n
	}
	g.Expect(bytes.Equal(got, want)).To(BeTrue(), "bytes changed in the tunnel")

	g.Expect(tun.Stdin().Close()).To(Succeed())
	ee := exitError(t, waitDone(t, tun, eventually))
	g.Expect(ee.Code).To(Equal(0))
	g.Expect(ee.Reason).To(Equal(tunnel.EndStdinClosed))
	rest, err := io.ReadAll(tun.Stdout())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rest).To(BeEmpty())
	_, err = tun.Stdin().Write([]byte("late"))
	g.Expect(err).To(HaveOccurred(), "a write after the end must fail")
}

func TestTunnelRefusesWrongOrMissingToken(t *testing.T) {
	g := NewWithT(t)
	marker := filepath.Join(t.TempDir(), "started")
	addr := serveInProcess(t, Config{Command: []string{"sh", "-c", "echo > " + marker + "; exec cat"}})
	for _, tok := range []string{"", "wrong-token-of-some-length", testToken + "x", testToken[:len(testToken)-1], "Bearer " + testToken} {
		ctx, cancel := context.WithTimeout(context.Background(), eventually)
		tun, err := tunnel.Dial(ctx, addr, creds(tok))
		cancel()
		g.Expect(tun).To(BeNil())
		g.Expect(err).To(MatchError(tunnel.ErrUnauthorized), "token %q", tok)
	}
	// No Authorization header at all, and another scheme.
	for _, h := range []string{"", "Basic " + testToken} {
		req, _ := http.NewRequest(http.MethodPost, "https://"+addr+tunnel.TunnelPath, strings.NewReader(""))
		if h != "" {
			req.Header.Set("Authorization", h)
		}
		resp, err := (&http.Client{Transport: probeTransport()}).Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized))
	}
	g.Expect(marker).NotTo(BeAnExistingFile(), "a refused tunnel started the command")

	tun := dialOK(t, addr)
	g.Expect(tun.Stdin().Close()).To(Succeed())
	exitError(t, waitDone(t, tun, eventually))
	g.Expect(marker).To(BeAnExistingFile())
}

func TestProbesAndMethods(t *testing.T) {
	g := NewWithT(t)
	addr := serveInProcess(t, Config{Command: []string{"cat"}})
	for _, path := range []string{tunnel.HealthzPath, tunnel.ReadyzPath} {
		code, body := get(t, "https://"+addr+path)
		g.Expect(code).To(Equal(http.StatusOK), path)
		g.Expect(body).To(Equal("ok\n"))
	}
	code, _ := get(t, "https://"+addr+tunnel.TunnelPath)
	g.Expect(code).To(Equal(http.StatusMethodNotAllowed))
}

func TestStartFailuresAreClearErrors(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	noFormat := filepath.Join(dir, "no-format")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(noFormat, []byte("neither ELF nor #!\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, command, want string
	}{
		{"not found in PATH", "no-such-mcp-server", `"no-such-mcp-server": executable file not found in $PATH`},
		{"no such path", filepath.Join(dir, "missing"), "no such file or directory"},
		{"not executable", notExec, `permission denied`},
		{"not an executable format", noFormat, `exec format error`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			addr := serveInProcess(t, Config{Command: []string{tc.command}})
			ctx, cancel := context.WithTimeout(context.Background(), eventually)
			defer cancel()
			tun, err := tunnel.Dial(ctx, addr, creds(testToken))
			g.Expect(tun).To(BeNil())
			var se *tunnel.StartError
			g.Expect(errors.As(err, &se)).To(BeTrue(), "got %v", err)
			g.Expect(se.Error()).To(ContainSubstring("the shim could not start the server process"))
			g.Expect(se.Message).To(ContainSubstring(tc.want))

			// The failure freed the slot: the next tunnel gets the same answer.
			_, err = tunnel.Dial(ctx, addr, creds(testToken))
			g.Expect(errors.As(err, &se)).To(BeTrue(), "got %v", err)
		})
	}
}

func TestCommandThatExitsAtOnceEndsTheTunnel(t *testing.T) {
	g := NewWithT(t)
	addr := serveInProcess(t, Config{Command: []string{"sh", "-c", "exit 7"}})
	tun := dialOK(t, addr)
	ee := exitError(t, waitDone(t, tun, eventually))
	g.Expect(ee.Code).To(Equal(7))
	g.Expect(ee.Reason).To(Equal(tunnel.EndExited))
	g.Expect(ee.Error()).To(Equal("the server process exited: exit status 7"))
	_, err := io.ReadAll(tun.Stdout())
	g.Expect(err).NotTo(HaveOccurred(), "a confirmed end reads as EOF")
}

func TestDialHonoursItsContextOnlyWhileOpening(t *testing.T) {
	g := NewWithT(t)
	addr := serveInProcess(t, Config{Command: []string{"cat"}})
	ctx, cancel := context.WithCancel(context.Background())
	tun, err := tunnel.Dial(ctx, addr, creds(testToken))
	g.Expect(err).NotTo(HaveOccurred())
	cancel() // the tunnel outlives the context it was opened with
	_, err = tun.Stdin().Write([]byte("still here\n"))
	g.Expect(err).NotTo(HaveOccurred())
	line := make([]byte, len("still here\n"))
	_, err = io.ReadFull(tun.Stdout(), line)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(line)).To(Equal("still here\n"))
	g.Expect(tun.Stdin().Close()).To(Succeed())
	exitError(t, waitDone(t, tun, eventually))

	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	_, err = tunnel.Dial(done, addr, creds(testToken))
	g.Expect(err).To(MatchError(context.Canceled))
}

func TestCloseAbortsWithoutConfirmation(t *testing.T) {
	g := NewWithT(t)
	addr := serveInProcess(t, Config{Command: []string{"cat"}, TerminateGrace: shortGrace})
	tun := dialOK(t, addr)
	tun.Close()
	err := waitDone(t, tun, eventually)
	g.Expect(err).To(MatchError(tunnel.ErrUnconfirmed))
	var ee *tunnel.ExitError
	g.Expect(errors.As(err, &ee)).To(BeFalse())
	_, err = io.ReadAll(tun.Stdout())
	g.Expect(err).To(HaveOccurred())

	// The shim saw its client go and freed the slot for the next tunnel.
	next := dialOK(t, addr)
	g.Expect(next.Stdin().Close()).To(Succeed())
	exitError(t, waitDone(t, next, eventually))
}

func TestStdoutCloseStillWaitsForTheConfirmation(t *testing.T) {
	g := NewWithT(t)
	// A child that floods stdout: the reader stops reading, the tunnel
	// still reaches its confirmed end.
	addr := serveInProcess(t, Config{Command: []string{"yes", "flood"}, TerminateGrace: shortGrace})
	tun := dialOK(t, addr)
	buf := make([]byte, 4096)
	_, err := io.ReadFull(tun.Stdout(), buf)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tun.Stdout().Close()).To(Succeed())
	g.Expect(tun.Stdin().Close()).To(Succeed())
	ee := exitError(t, waitDone(t, tun, eventually))
	g.Expect(ee.Signal.String()).To(Equal("terminated"))
	g.Expect(ee.Reason).To(Equal(tunnel.EndStdinClosed))
}

func TestNewServerAndReadTokenRefuseBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, path, want string
	}{
		{"no path", "", "refuses to run without --token-file"},
		{"missing file", filepath.Join(dir, "absent"), "no such file"},
		{"empty", write("empty", "\n"), "at least 16 bytes"},
		{"short", write("short", "secret\n"), "at least 16 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := ReadToken(tc.path)
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
			g.Expect(err.Error()).NotTo(ContainSubstring("secret"))
		})
	}
	g := NewWithT(t)
	tok, err := ReadToken(write("ok", "  "+testToken+"\n"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(tok)).To(Equal(testToken))

	_, err = NewServer(Config{Token: tok})
	g.Expect(err).To(MatchError(ContainSubstring("no command")))
	_, err = NewServer(Config{Command: []string{"cat"}, Token: []byte("short")})
	g.Expect(err).To(MatchError(ContainSubstring("at least 16 bytes")))
	_, err = NewServer(Config{Command: []string{"cat"}, Token: tok, Certificate: testCertificate(), TerminateGrace: -time.Second})
	g.Expect(err).To(MatchError(ContainSubstring("negative")))
	_, err = NewServer(Config{Command: []string{"cat"}, Token: tok})
	g.Expect(err).To(MatchError(ContainSubstring("refuses to serve the tunnel in the clear")))
}

// TestTunnelIsPinnedToTheIssuedCertificate: a shim with any other key pair
// (say, whoever answers at a reused Pod IP) is refused during the
// handshake, before the token is sent; no child starts.
func TestTunnelIsPinnedToTheIssuedCertificate(t *testing.T) {
	g := NewWithT(t)
	marker := filepath.Join(t.TempDir(), "started")
	otherCert, otherKey, err := tunnel.NewKeyPair("shim test")
	g.Expect(err).NotTo(HaveOccurred())
	other, err := tls.X509KeyPair(otherCert, otherKey)
	g.Expect(err).NotTo(HaveOccurred())
	addr := serveInProcess(t, Config{Command: []string{"sh", "-c", "echo > " + marker + "; exec cat"}, Certificate: &other})

	ctx, cancel := context.WithTimeout(context.Background(), eventually)
	defer cancel()
	tun, err := tunnel.Dial(ctx, addr, creds(testToken))
	g.Expect(tun).To(BeNil())
	g.Expect(err).To(MatchError(tunnel.ErrPinMismatch))
	g.Expect(marker).NotTo(BeAnExistingFile())

	// The same shim, pinned right, opens.
	tun, err = tunnel.Dial(ctx, addr, tunnel.Credentials{Token: testToken, Cert: otherCert})
	g.Expect(err).NotTo(HaveOccurred())
	tun.Close()
	<-tun.Done()

	// Without a certificate to pin, nothing is dialled in the clear.
	_, err = tunnel.Dial(ctx, addr, tunnel.Credentials{Token: testToken})
	g.Expect(err).To(MatchError(ContainSubstring("no pinned certificate")))
}

// TestShimServesOnlyTLS: a request in the clear gets no tunnel.
func TestShimServesOnlyTLS(t *testing.T) {
	g := NewWithT(t)
	addr := serveInProcess(t, Config{Command: []string{"cat"}})
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+tunnel.TunnelPath, strings.NewReader(""))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusBadRequest), "Go's TLS server answers a plain request with 400")
}

func TestFloodIsRelayedInFull(t *testing.T) {
	g := NewWithT(t)
	const size = 3_000_000
	addr := serveInProcess(t, Config{Command: []string{"sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x; exit 4"}})
	tun := dialOK(t, addr)
	out, err := io.ReadAll(tun.Stdout())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(HaveLen(size))
	g.Expect(bytes.Count(out, []byte("x"))).To(Equal(size))
	ee := exitError(t, tun.Err())
	g.Expect(ee.Code).To(Equal(4))
}
