package shim

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/mcpbridge/operator/internal/shim/tunnel"
)

// Config builds a Server.
type Config struct {
	// Command is the server's argv, started directly (no shell).
	Command []string
	// Token authenticates tunnels; see ReadToken.
	Token []byte
	// Certificate is the TLS key pair the shim serves (LoadKeyPair);
	// required: the tunnel carries the token and the server's stdio.
	Certificate *tls.Certificate
	// TerminateGrace is the wait between stdin close, SIGTERM and SIGKILL
	// when a tunnel ends. Two of them must fit the supervisor's close
	// barrier. Zero means DefaultTerminateGrace.
	TerminateGrace time.Duration
	// ReapOrphans: this process is PID 1 or a subreaper (proc.BecomeSubreaper)
	// and reaps every orphan re-parented to it. Only for a process whose
	// children are all the shim's: it waits for "any child".
	ReapOrphans bool
	// Stderr is the children's stderr; nil means os.Stderr.
	Stderr *os.File
	// Log receives the shim's own lines; nil means slog.Default().
	Log *slog.Logger
}

// DefaultTerminateGrace keeps stdin close → SIGTERM → SIGKILL (two graces)
// well inside the supervisor's 5 s close barrier.
const DefaultTerminateGrace = 1500 * time.Millisecond

// MinTokenBytes is the shortest token the shim accepts.
const MinTokenBytes = 16

// Bounds on finishing a tunnel whose child has been reaped.
const (
	// stdoutDrain bounds reading what the dead group left in the stdout
	// pipe: a descendant that escaped the group may still hold it open.
	stdoutDrain = 500 * time.Millisecond
	// responseFinish bounds writing the rest of the response and its
	// trailers to a client that does not read any more.
	responseFinish = 5 * time.Second
)

// Server is the shim: it runs one child per tunnel, one tunnel at a time.
type Server struct {
	argv        []string
	tokenDigest [sha256.Size]byte
	tls         *tls.Config
	grace       time.Duration
	stderr      *os.File
	log         *slog.Logger
	reaper      *reaper

	mu       sync.Mutex
	live     *slot // the tunnel holding the one child slot, or nil
	stopping bool

	refusals struct {
		mu       sync.Mutex
		last     time.Time // when a refusal was last logged
		unlogged int
	}
}

// slot is a tunnel's claim on the one child the shim runs at a time.
type slot struct {
	child     *child        // nil until started
	preempted bool          // a newer tunnel wants the slot before the child started
	freed     chan struct{} // closed when the slot is released
}

// NewServer checks cfg and builds a Server; Serve runs it.
func NewServer(cfg Config) (*Server, error) {
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		return nil, errors.New("no command to run: give it after --")
	}
	if len(cfg.Token) < MinTokenBytes {
		return nil, fmt.Errorf("the tunnel token must be at least %d bytes", MinTokenBytes)
	}
	if cfg.TerminateGrace < 0 {
		return nil, errors.New("the terminate grace must not be negative")
	}
	if cfg.Certificate == nil {
		return nil, errors.New("no TLS key pair: the shim refuses to serve the tunnel in the clear")
	}
	s := &Server{
		argv:        cfg.Command,
		tokenDigest: sha256.Sum256(cfg.Token),
		tls:         tunnel.ServerTLS(*cfg.Certificate),
		grace:       cfg.TerminateGrace,
		stderr:      cfg.Stderr,
		log:         cfg.Log,
		reaper:      newReaper(cfg.ReapOrphans),
	}
	if s.grace == 0 {
		s.grace = DefaultTerminateGrace
	}
	if s.stderr == nil {
		s.stderr = os.Stderr
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	return s, nil
}

// ReadToken reads the tunnel token from a file (a mounted Secret); white
// space around it is ignored. Errors never quote the file's content.
func ReadToken(path string) ([]byte, error) {
	if path == "" {
		return nil, errors.New("no token file: the shim refuses to run without --token-file")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	tok := []byte(strings.TrimSpace(string(b)))
	if len(tok) < MinTokenBytes {
		return nil, fmt.Errorf("token file %s: the token must be at least %d bytes", path, MinTokenBytes)
	}
	return tok, nil
}

// LoadKeyPair reads the shim's certificate and key (PEM files of the
// mounted Secret). Errors never quote the files' content.
func LoadKeyPair(certFile, keyFile string) (*tls.Certificate, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("no TLS key pair: the shim refuses to run without --tls-cert-file and --tls-key-file")
	}
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS key pair %s, %s: %w", certFile, keyFile, err)
	}
	return &c, nil
}

// Serve serves TLS on ln until ctx ends, then ends the live tunnel
// (SIGTERM to its child's group at once, SIGKILL after the grace), waits
// until the child has been reaped and its tunnel confirmed, and returns.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ln = tls.NewListener(lingeringListener{ln}, s.tls)
	s.reaper.run()
	defer s.reaper.close()
	hs := &http.Server{
		Handler:           s.handler(),
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	var err error
	select {
	case err = <-served:
	case <-ctx.Done():
	}
	s.log.Info("stopping")
	// Keep answering (503 to new tunnels, /readyz failing) until the live
	// child has been reaped: SIGKILL goes out at the latest a grace on.
	if freed := s.stop(); freed != nil {
		<-freed
	}
	// Then let its handler write the confirmation.
	sctx, cancel := context.WithTimeout(context.Background(), stdoutDrain+responseFinish)
	defer cancel()
	if serr := hs.Shutdown(sctx); serr != nil {
		_ = hs.Close()
	}
	if err == nil {
		err = <-served
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// stop refuses new tunnels and ends the live one; the channel is closed
// once its child has been reaped.
func (s *Server) stop() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
	if s.live == nil {
		return nil
	}
	if s.live.child != nil {
		s.live.child.terminate()
	}
	return s.live.freed
}

func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+tunnel.TunnelPath, s.serveTunnel)
	mux.HandleFunc("GET "+tunnel.HealthzPath, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET "+tunnel.ReadyzPath, func(w http.ResponseWriter, _ *http.Request) {
		if s.isStopping() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

func (s *Server) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// authorized compares digests, in constant time and independent of the
// presented token's length.
func (s *Server) authorized(r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	got := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(got[:], s.tokenDigest[:]) == 1
}

// errStopping: a tunnel asked for while the shim stops.
var errStopping = errors.New("the shim is shutting down")

// acquire takes the one child slot. A live tunnel is pre-empted: its child
// is ended as if its client had closed stdin, and the new tunnel waits
// until that child has been reaped. A stale tunnel of a client that died
// silently would otherwise hold the slot until TCP gave up on it.
func (s *Server) acquire(ctx context.Context) (*slot, error) {
	for {
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			return nil, errStopping
		}
		old := s.live
		if old == nil {
			sl := &slot{freed: make(chan struct{})}
			s.live = sl
			s.mu.Unlock()
			return sl, nil
		}
		if old.child != nil {
			old.child.end(tunnel.EndPreempted)
		} else {
			old.preempted = true
		}
		s.mu.Unlock()
		select {
		case <-old.freed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// release frees sl once its child, if any, has been reaped.
func (s *Server) release(sl *slot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live == sl {
		s.live = nil
	}
	close(sl.freed)
}

// errPreempted: a newer tunnel came before this one's child started.
var errPreempted = errors.New("a newer tunnel pre-empted this one")

// start starts the slot's child, unless the shim began to stop or a newer
// tunnel asked for the slot meanwhile.
func (s *Server) start(sl *slot) (*child, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return nil, errStopping
	}
	if sl.preempted {
		return nil, errPreempted
	}
	c, err := startChild(s.reaper, s.argv, s.stderr, s.grace)
	if err != nil {
		return nil, err
	}
	sl.child = c
	return c, nil
}
