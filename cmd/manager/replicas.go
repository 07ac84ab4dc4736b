package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mcpbridge/operator/internal/bridge"
	"github.com/mcpbridge/operator/internal/controller"
	"github.com/mcpbridge/operator/internal/gateway"
	"github.com/mcpbridge/operator/internal/membership"
	"github.com/mcpbridge/operator/internal/peer"
	"github.com/mcpbridge/operator/internal/toolsets"
)

// replicaOptions say who this replica is among the manager's replicas;
// see docs/design.md, "Replicas and ownership".
type replicaOptions struct {
	name             string
	leaseDuration    time.Duration
	bindAddress      string
	advertiseAddress string
	drainDelay       time.Duration
	// namespace holds the replicas' Leases: the manager's own.
	namespace string
}

// defaultReplicaPort is the port of --replica-bind-address's default.
const defaultReplicaPort = "8091"

func (o *replicaOptions) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.name, "replica-name", "",
		"This replica's name among the manager's replicas, unique among them; empty is env POD_NAME, else the host name.")
	fs.DurationVar(&o.leaseDuration, "replica-lease-duration", 10*time.Second,
		"How long a replica stays a member after its peers last saw it renew its Lease (it renews every third of it); whole seconds.")
	fs.StringVar(&o.bindAddress, "replica-bind-address", ":"+defaultReplicaPort,
		"Address the replicas' internal endpoint binds to.")
	fs.DurationVar(&o.drainDelay, "replica-drain-delay", 3*time.Second,
		"How long a stopping replica still serves agents, answering with Connection: close, after its readiness fails, "+
			"so that the Service sends their next connections to the other replicas first; at most 10s.")
	fs.StringVar(&o.advertiseAddress, "replica-advertise-address", "",
		"Address (host:port) the other replicas reach this one at; empty is env POD_IP with the port of --replica-bind-address "+
			"(outside a cluster: 127.0.0.1 with that port).")
}

// resolve fills the defaults that come from the environment and checks
// every value. The Leases go to the leader election's namespace if set,
// else to managerNamespace (--manager-namespace, the Pod's own in a
// cluster), else, outside a cluster, to "default".
func (o *replicaOptions) resolve(leaderElectionNamespace, managerNamespace string, inCluster bool) error {
	if o.name == "" {
		o.name = os.Getenv("POD_NAME")
	}
	if o.name == "" {
		o.name, _ = hostname()
	}
	if errs := validation.IsDNS1123Subdomain(membership.LeaseName(o.name)); o.name == "" || len(errs) > 0 {
		return fmt.Errorf("--replica-name=%q cannot name a Lease (%s): set --replica-name or env POD_NAME to a lower-case DNS name",
			o.name, strings.Join(errs, "; "))
	}
	if o.leaseDuration < time.Second || o.leaseDuration%time.Second != 0 {
		return fmt.Errorf("--replica-lease-duration=%s must be a whole number of seconds, at least 1s", o.leaseDuration)
	}
	if o.drainDelay < 0 || o.drainDelay > 10*time.Second {
		return fmt.Errorf("--replica-drain-delay=%s must be between 0s and 10s", o.drainDelay)
	}
	_, port, err := net.SplitHostPort(o.bindAddress)
	if err != nil || !validPort(port) {
		return fmt.Errorf("--replica-bind-address=%q: want [host]:port, such as :%s", o.bindAddress, defaultReplicaPort)
	}
	if o.advertiseAddress == "" {
		if o.advertiseAddress, err = defaultAdvertiseAddress(port, inCluster); err != nil {
			return err
		}
	}
	if err := checkAdvertiseAddress(o.advertiseAddress); err != nil {
		return err
	}
	o.namespace = leaderElectionNamespace
	if o.namespace == "" {
		o.namespace = managerNamespace
	}
	if o.namespace == "" {
		o.namespace = "default" // outside a cluster, as kubectl does
	}
	return nil
}

// defaultAdvertiseAddress is the Pod's IP (env POD_IP, from the downward
// API) with port; outside a cluster, the loopback address.
func defaultAdvertiseAddress(port string, inCluster bool) (string, error) {
	ip := os.Getenv("POD_IP")
	switch {
	case ip != "":
	case inCluster:
		return "", fmt.Errorf("--replica-advertise-address is empty and env POD_IP is not set: " +
			"give the manager's container POD_IP from the downward API (fieldRef status.podIP), or set the flag")
	default:
		ip = "127.0.0.1"
	}
	return net.JoinHostPort(ip, port), nil
}

// checkAdvertiseAddress refuses what no peer could dial: no host, an
// unspecified address, no port.
func checkAdvertiseAddress(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err == nil && host != "" && validPort(port) {
		ip, ipErr := netip.ParseAddr(host)
		if ipErr != nil || !ip.IsUnspecified() {
			return nil
		}
	}
	return fmt.Errorf("--replica-advertise-address=%q: want host:port that the other replicas can dial, such as 10.0.0.7:%s",
		addr, defaultReplicaPort)
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n > 0 && n < 65536
}

// setupMembership adds this replica's membership (its Lease, the live set
// of replicas) to the manager; it runs on every replica, leader or not.
func setupMembership(mgr ctrl.Manager, o *replicaOptions, releaseAfter <-chan struct{}) (*membership.Membership, error) {
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, err
	}
	m, err := membership.New(membership.Config{Name: o.name, Address: o.advertiseAddress, Namespace: o.namespace,
		LeaseDuration: o.leaseDuration, Client: cs, ReleaseAfter: releaseAfter,
		// The supervisors run with the default close barrier: what a
		// fenced replica needs at most to reap a stdio server's child.
		HoldGrace: bridge.DefaultCloseBarrier})
	if err != nil {
		return nil, err
	}
	return m, mgr.Add(m)
}

// hostname names a replica outside a Pod (a variable so that tests choose
// the host name).
var hostname = os.Hostname

// replicaSet is the membership as the McpServer reconciler asks it.
type replicaSet struct{ *membership.Membership }

func (s replicaSet) SelfLive() bool {
	_, ok := s.Live(s.Name())
	return ok
}

func (s replicaSet) MayHold(name string) bool {
	ok, _ := s.Membership.MayHold(name)
	return ok
}

// addReadiness makes /readyz pass only while this replica can serve the
// whole registry: it has joined the replicas, its gateway serves every
// McpToolSet, and it is not shutting down (it fails at once on SIGTERM, so
// that the Service sends agents elsewhere while it hands its servers over).
func addReadiness(mgr ctrl.Manager, members *membership.Membership, mirror *toolsets.Mirror) error {
	var draining atomic.Bool
	if err := mgr.Add(drainingFlag{&draining}); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("replica", func(req *http.Request) error {
		if draining.Load() {
			return errors.New("shutting down")
		}
		select {
		case <-members.Joined():
		default:
			return errors.New("not a member of the replicas yet")
		}
		return mirror.Ready(req)
	})
}

// setupForwarding serves this replica's internal endpoint (mutual TLS from
// the replicas' own CA) to the supervisors of its own registry, and has the
// mirror forward the calls of servers held elsewhere through its client.
// See docs/design.md, "Forwarding between replicas".
func setupForwarding(mgr ctrl.Manager, opts *options, members *membership.Membership, mirror *toolsets.Mirror,
	sups *controller.Supervisors, gw *gateway.Gateway) error {
	var ends *peer.SessionEnds
	pr, err := peer.New(peer.Config{Name: opts.replicas.name, Namespace: opts.replicas.namespace,
		BindAddress: opts.replicas.bindAddress, Client: mgr.GetClient(), Reader: mgr.GetAPIReader(),
		Local: peer.LocalFunc(mirror.Local), Ended: func(e []peer.EndedSession) { ends.Received(e) }, Results: gw.ResultBytes,
		TracerProvider: opts.tracerProvider})
	if err != nil {
		return err
	}
	if err := pr.AddToManager(mgr); err != nil {
		return err
	}
	ends = relaySessionEnds(opts.replicas.name, members, pr.Client(), gw)
	if err := mgr.Add(ends); err != nil {
		return err
	}
	// The supervisors answer the calls the endpoint has taken until it has
	// finished them.
	sups.DrainAfter = append(sups.DrainAfter, pr.Endpoint().Ended())
	client := pr.Client()
	members.ReportUnreachable(client.Unreachable)
	if err := mgr.Add(peerProbe{client: client, members: members, issued: pr.Issued(), every: opts.replicas.leaseDuration}); err != nil {
		return err
	}
	mirror.Forward = func(ctx context.Context, p toolsets.Peer, ns, owner, tool string, args json.RawMessage, sdk bool) (json.RawMessage, bool, error) {
		return client.Call(ctx, peer.Target{Name: p.Name, Address: p.Address},
			peer.Call{Namespace: ns, Owner: owner, Tool: tool, Arguments: args, SDK: sdk})
	}
	// Only calls that never ran are sent again: not to this replica, or
	// before any connection was made.
	mirror.Retryable = func(err error) bool {
		return errors.Is(err, peer.ErrNotServedHere) || errors.Is(err, peer.ErrNotSent)
	}
	return mgr.AddReadyzCheck("replica-certificate", func(*http.Request) error {
		select {
		case <-pr.Issued():
			return nil
		default:
			return errors.New("no replica certificate yet")
		}
	})
}

// relaySessionEnds has the agent sessions this replica's gateway ends
// ended on every replica, and those the others end ended here. See
// docs/design.md, "Sessions on every replica".
func relaySessionEnds(self string, members *membership.Membership, client *peer.Client, gw *gateway.Gateway) *peer.SessionEnds {
	ends := peer.NewSessionEnds(peer.SessionEndsConfig{Self: self, Send: client.SendEnded, Apply: gw.EndedElsewhere,
		FlushAfter: gw.Drained(), // agents may still DELETE while the gateway drains
		Log:        ctrl.Log.WithName("peer"),
		Members: func() []peer.Target {
			mbs := members.Members()
			out := make([]peer.Target, len(mbs))
			for i, mb := range mbs {
				out[i] = peer.Target{Name: mb.Name, Address: mb.Address, Process: mb.Process}
			}
			return out
		}})
	gw.SessionsEnded = ends.Ended
	return ends
}

// drainingFlag is set once the manager stops. It runs on every replica,
// and so is stopped with the gateway: a RunnableFunc would wait for
// leadership and be stopped after everything else.
type drainingFlag struct{ draining *atomic.Bool }

func (f drainingFlag) Start(ctx context.Context) error {
	<-ctx.Done()
	f.draining.Store(true)
	return nil
}

func (drainingFlag) NeedLeaderElection() bool { return false }

// peerProbe probes the internal endpoint of every live replica, this one's
// own included, once per lease duration, so that a replica that cannot be
// reached at its advertised address shows in this replica's Lease
// (membership.UnreachableAnnotation), in mcpbridge_replica_peer_unreachable
// and in the log even while no call is forwarded to it; it forgets the
// replicas that left. See docs/design.md, "Forwarding between replicas".
type peerProbe struct {
	client  *peer.Client
	members *membership.Membership
	issued  <-chan struct{}
	every   time.Duration
}

func (peerProbe) NeedLeaderElection() bool { return false }

func (p peerProbe) Start(ctx context.Context) error {
	for _, ready := range []<-chan struct{}{p.issued, p.members.Joined()} {
		select {
		case <-ctx.Done():
			return nil
		case <-ready:
		}
	}
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		p.round(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (p peerProbe) round(ctx context.Context) {
	live := map[string]bool{}
	var wg sync.WaitGroup
	for _, mb := range p.members.Members() {
		live[mb.Name] = true
		wg.Go(func() { _ = p.client.Probe(ctx, peer.Target{Name: mb.Name, Address: mb.Address}) })
	}
	wg.Wait()
	for _, name := range p.client.Known() {
		if !live[name] {
			p.client.Forget(name)
		}
	}
}
