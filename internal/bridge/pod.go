package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbridge/operator/internal/shim/tunnel"
)

// The Pod runtime's transport: the stdio path over a tunnel to the shim in
// the server's own Pod. Everything above the link is the stdio path's: the
// tunnel carries the child's stdin and stdout unchanged, closing the link
// closes the child's stdin, the link is closed once the shim has confirmed
// the child's reap, and the child's exit is a loss. Before a generation's
// connection budget starts, the dialer waits for the Pod to be Ready; that
// wait is not an attempt.
// See docs/design.md, "The shim and the tunnel" and "Pods that are not there
// yet".

// PodSource tells one supervisor which Pod runs its server. The controller
// implements it, bound to the supervisor's Pod template.
type PodSource interface {
	// Current returns the Pod that runs this supervisor's template and is
	// not being deleted (ok is false when there is none), and a channel
	// that is closed when the answer may have changed.
	Current() (pod PodInfo, ok bool, changed <-chan struct{})
}

// PodInfo is what a supervisor needs to know of its server's Pod.
type PodInfo struct {
	Name string
	UID  string
	IP   string
	// Ready: the Pod's Ready condition is True and it has an IP.
	Ready bool
	// Waiting says in the kubelet's words why the Pod is not Ready:
	// "ContainerCreating", "ImagePullBackOff: <message>", ...
	Waiting string
}

// PodTunnel is how a supervisor of a Pod-runtime server reaches it.
type PodTunnel struct {
	Pods PodSource
	// Token authenticates the tunnel to the shim.
	Token string
	// Cert is the shim's certificate (PEM), pinned: the tunnel opens only
	// to a shim that serves exactly it.
	Cert []byte
	// Port is the shim's port; tunnel.DefaultPort when 0.
	Port int
}

// noPod is the waiting reason while the Deployment has no Pod of the
// supervisor's template.
const noPod = "No Pod of the current template yet"

// tunnelDialer opens one tunnel per generation to the shim in the Pod.
type tunnelDialer struct {
	target  *PodTunnel
	barrier time.Duration // after a close, how long to wait for the shim's confirmation
	sniff   func([]byte)
	share   *share // the namespace's (Options.Shares)
}

// await returns once the Pod is Ready, reporting every new reason to wait
// through report; it returns the last reason when ctx ends first.
func (d *tunnelDialer) await(ctx context.Context, report func(PodWait)) error {
	if d.target == nil || d.target.Pods == nil {
		return errors.New("no Pod source for a Pod-runtime server")
	}
	var last PodWait
	for {
		pod, ok, changed := d.target.Pods.Current()
		if ok && pod.Ready {
			return nil
		}
		w := PodWait{Pod: pod.Name, Reason: noPod}
		if ok {
			w.Reason = pod.Waiting
		}
		if w != last {
			report(w)
			last = w
		}
		select {
		case <-ctx.Done():
			return errors.New(w.Reason)
		case <-changed:
		}
	}
}

// dial opens the tunnel to the Pod await found Ready, and watches the Pod
// for as long as the tunnel lives.
func (d *tunnelDialer) dial(ctx context.Context, onLost func(error)) (link, error) {
	if d.target == nil || d.target.Pods == nil {
		return nil, errors.New("no Pod source for a Pod-runtime server")
	}
	pod, ok, changed := d.target.Pods.Current()
	if !ok || !pod.Ready {
		return nil, fmt.Errorf("the server's Pod %s is not Ready any more", podWord(pod, ok))
	}
	port := d.target.Port
	if port == 0 {
		port = tunnel.DefaultPort
	}
	t, err := tunnel.Dial(ctx, net.JoinHostPort(pod.IP, strconv.Itoa(port)), tunnel.Credentials{Token: d.target.Token, Cert: d.target.Cert})
	if err != nil {
		return nil, fmt.Errorf("Pod %s: %w", pod.Name, err)
	}
	l := &tunnelLink{t: t, pod: pod, barrier: d.barrier, sniff: d.sniff, share: d.share, down: make(chan struct{})}
	go l.watchPod(d.target.Pods, changed, onLost)
	return l, nil
}

func podWord(pod PodInfo, ok bool) string {
	if !ok {
		return "(none)"
	}
	return pod.Name
}

// PodWait is why a supervisor waits for its server's Pod: the Pod (empty
// when there is none yet) and the kubelet's words.
type PodWait struct {
	Pod    string
	Reason string
}

// tunnelLink is one generation's tunnel.
type tunnelLink struct {
	t         *tunnel.Tunnel
	pod       PodInfo
	barrier   time.Duration
	sniff     func([]byte)
	share     *share // the namespace's (pacedStdio)
	closeOnce sync.Once
	down      chan struct{} // closed once the tunnel has ended and watchPod returned
}

func (l *tunnelLink) transport() mcp.Transport {
	r, w := pacedStdio(&endAfter{ReadCloser: l.t.Stdout(), done: l.down}, l.t.Stdin(), l.share)
	if l.sniff != nil {
		r = &sniffReader{ReadCloser: r, fn: l.sniff}
	}
	return &mcp.IOTransport{Reader: r, Writer: w}
}

// close half-closes the tunnel: the child reads EOF, and the shim ends it
// (SIGTERM, then SIGKILL) unless it exits by itself, then confirms the
// reap. A shim that has not confirmed within the close barrier is cut off;
// it then ends the child itself, and refuses to start the next one before
// that child is reaped.
func (l *tunnelLink) close() {
	l.closeOnce.Do(func() {
		_ = l.t.Stdin().Close()
		go func() {
			timer := time.NewTimer(l.barrier)
			defer timer.Stop()
			select {
			case <-l.t.Done():
			case <-timer.C:
				l.t.Close()
			}
		}()
	})
}

func (l *tunnelLink) closed() <-chan struct{} { return l.down }

// exitError says how the remote child ended; valid once closed() is closed.
func (l *tunnelLink) exitError() error {
	err := l.t.Err()
	if err == nil {
		err = errors.New("the tunnel ended")
	}
	return fmt.Errorf("%w (Pod %s)", err, l.pod.Name)
}

func (l *tunnelLink) podName() string { return l.pod.Name }

// watchPod raises a loss when the tunnel's Pod goes away: deleted, replaced
// (another UID), or no longer Ready. It returns once the tunnel has ended.
func (l *tunnelLink) watchPod(src PodSource, changed <-chan struct{}, onLost func(error)) {
	defer close(l.down)
	for {
		select {
		case <-l.t.Done():
			return
		case <-changed:
		}
		var cur PodInfo
		var ok bool
		cur, ok, changed = src.Current()
		switch {
		case !ok || cur.UID != l.pod.UID:
			onLost(fmt.Errorf("the server's Pod %s was deleted or replaced", l.pod.Name))
		case !cur.Ready:
			onLost(fmt.Errorf("the server's Pod %s is no longer Ready: %s", l.pod.Name, cur.Waiting))
		default:
			continue
		}
		<-l.t.Done()
		return
	}
}

// endAfter holds back the end of the child's stdout until done is closed:
// the session then ends only once the link knows how the child ended, and
// a loss reports the exit rather than a bare end of stream.
type endAfter struct {
	io.ReadCloser
	done <-chan struct{}
}

func (r *endAfter) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if err != nil {
		<-r.done
	}
	return n, err
}
