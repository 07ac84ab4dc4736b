// Command manager runs the mcp-bridge operator: the McpServer controller, its
// connection supervisors and the MCP gateway, under one controller-runtime
// manager with leader election.
package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/controller"
	"github.com/mcpbridge/operator/internal/egress"
	"github.com/mcpbridge/operator/internal/gateway"
	"github.com/mcpbridge/operator/internal/gctune"
	"github.com/mcpbridge/operator/internal/kubeauth"
	"github.com/mcpbridge/operator/internal/membership"
	"github.com/mcpbridge/operator/internal/proc"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/internal/toolsets"
)

func main() {
	err := run(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	opts, err := parseOptions(fs, args)
	if err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts.zap)))
	log := ctrl.Log.WithName("setup")
	setMemoryLimit(log)
	flushTracing, err := setupTracing(opts)
	if err != nil {
		return err
	}
	defer flushTracing() // after the supervisors are disposed: their last spans too
	if err := proc.BecomeSubreaper(); err != nil {
		log.Error(err, "cannot adopt orphaned grandchildren of stdio servers; they may linger as zombies")
	}

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))

	cfg, err := config.GetConfig()
	if err != nil {
		return fmt.Errorf("load the kubeconfig (--kubeconfig, $KUBECONFIG, in-cluster or ~/.kube/config): %w", err)
	}
	metrics, certWatcher, err := metricsServerOptions(opts, scheme)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metrics,
		HealthProbeBindAddress:        opts.probeAddr,
		LeaderElection:                opts.leaderElect,
		LeaderElectionID:              "mcpbridge-manager.mcpbridge.dev",
		LeaderElectionNamespace:       opts.leaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		Cache:                         controller.CacheOptions(cacheOptions(opts.watchNamespaces), opts.replicas.name),
		GracefulShutdownTimeout:       ptr.To(30 * time.Second),
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	if certWatcher != nil {
		if err := mgr.Add(certWatcher); err != nil {
			return fmt.Errorf("watch the metrics certificate: %w", err)
		}
	}
	local := registry.New() // this replica's own supervisors publish here
	local.MaxToolBytesPerNamespace = opts.budgets.toolBytes
	sups := controller.NewSupervisors(controller.SupervisorsOptions{Registry: local, Log: ctrl.Log.WithName("supervisor"),
		Egress:         egress.New(opts.upstreamAllowCIDRs).WithCluster(opts.clusterCIDRs, egress.KubeOwners{Reader: mgr.GetAPIReader()}),
		TracerProvider: opts.tracerProvider})
	// The Lease is kept until the supervisors are disposed: see
	// docs/design.md, "Replicas and ownership" (shutdown).
	members, err := setupMembership(mgr, &opts.replicas, sups.Disposed())
	if err != nil {
		return fmt.Errorf("set up the replica membership: %w", err)
	}
	mirror, err := setupControllers(mgr, opts, members, sups)
	if err != nil {
		return err
	}
	if q := gctune.New(opts.gc); q != nil {
		if err := mgr.Add(q); err != nil {
			return fmt.Errorf("follow the allocation rate: %w", err)
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("add health check: %w", err)
	}
	if err := addReadiness(mgr, members, mirror); err != nil {
		return fmt.Errorf("add ready check: %w", err)
	}

	log.Info("starting manager", "gatewayBindAddress", opts.gatewayAddr, "gatewayAuth", opts.gatewayAuth,
		"gatewayTokenAudiences", opts.gatewayAudiences, "gatewayTLS", opts.gatewayTLS.enabled, "gatewayCertDir", opts.gatewayTLS.certDir, "gatewayDNSNames", opts.gatewayTLS.dnsNames,
		"watchNamespaces", opts.watchNamespaces, "upstreamAllowCIDRs", opts.upstreamAllowCIDRs, "clusterCIDRs", opts.clusterCIDRs, "metricsBindAddress", opts.metricsAddr, "metricsSecure", opts.metricsSecure,
		"localStdioNamespaces", opts.stdio.localNamespaces, "shimImage", opts.stdio.shimImage,
		"managerPodLabels", opts.stdio.managerPodLabels, "managerNamespace", opts.stdio.managerNamespace, "limits", opts.limits,
		"gatewayBudgets", opts.budgets.gateway, "maxToolBytesPerNamespace", opts.budgets.toolBytes,
		"replica", opts.replicas.name, "replicaAdvertiseAddress", opts.replicas.advertiseAddress,
		"replicaLeaseNamespace", opts.replicas.namespace, "replicaLeaseDuration", opts.replicas.leaseDuration,

		"reviewLimits", opts.authLimits)
	err = mgr.Start(ctrl.SetupSignalHandler())
	// No stdio server may outlive the manager, however it stopped.
	sups.DisposeAll()
	return err
}

// setupControllers wires the registry the gateway serves, which mirrors
// every replica's McpToolSets, the gateway and the McpServer reconciler
// into the manager, around this replica's own supervisors (sups) and their
// registry. See docs/design.md, "Replicas and ownership".
func setupControllers(mgr ctrl.Manager, opts *options, members *membership.Membership, sups *controller.Supervisors) (*toolsets.Mirror, error) {
	local := sups.Registry
	// Each owner keeps its servers within the namespace's budget, counting
	// what the other replicas publish there; the mirror serves what the
	// owners published.
	served := registry.New()
	served.MaxToolBytesPerNamespace = math.MaxInt64
	local.Shared = served // one budget per namespace over the replicas
	gw, err := setupGateway(mgr, opts, served, sups)
	if err != nil {
		return nil, fmt.Errorf("set up the gateway: %w", err)
	}
	mirror := &toolsets.Mirror{Reader: mgr.GetCache(), Served: served, Self: opts.replicas.name, Local: local.Caller,
		Peer: func(name string) (toolsets.Peer, bool) {
			mb, ok := members.Live(name)
			return toolsets.Peer{Name: mb.Name, Address: mb.Address}, ok
		}}
	if err := setupForwarding(mgr, opts, members, mirror, sups, gw); err != nil {
		return nil, fmt.Errorf("set up forwarding between replicas: %w", err)
	}
	if err := mirror.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up the tool set mirror: %w", err)
	}
	r := &controller.McpServerReconciler{
		Client:      mgr.GetClient(),
		APIReader:   mgr.GetAPIReader(),
		Recorder:    mgr.GetEventRecorder("mcpbridge-manager"),
		Supervisors: sups,
		Runtime:     opts.runtimeConfig(),
		PodRuntime:  opts.stdio.podRuntime(),
		Replica:     opts.replicas.name,
		Replicas:    replicaSet{members},
		Membership:  members.Subscribe(),
		Leaving:     members.Leaving(),
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up the McpServer controller: %w", err)
	}
	return mirror, nil
}

// setupGateway serves the registry's tools: with token authentication
// (audience-bound TokenReviews, "use" reviews namespace-wide then per
// McpServer) unless --gateway-auth=none, and over TLS unless
// --gateway-tls=false (gatewaytls.go). See docs/design.md, "The gateway".
func setupGateway(mgr ctrl.Manager, opts *options, reg *registry.Registry, sups *controller.Supervisors) (*gateway.Gateway, error) {
	gw := &gateway.Gateway{Registry: reg, Log: ctrl.Log.WithName("gateway"), TracerProvider: opts.tracerProvider,
		Budgets: opts.budgets.gateway, DrainDelay: opts.replicas.drainDelay}
	// The supervisors answer the calls the gateway still takes while it
	// drains (docs/design.md, "Replicas and ownership": shutdown).
	sups.DrainAfter = append(sups.DrainAfter, gw.Drained())
	if err := addSessionKeys(mgr, gw, &opts.sessionKeys, opts.stdio.managerNamespace); err != nil {
		return nil, err
	}
	if opts.gatewayAuth == gatewayAuthToken {
		c := mgr.GetClient() // creates go to the apiserver, never to the cache
		gw.Auth = gateway.NewAccess(
			kubeauth.NewAuthenticator(c, opts.authLimits.authn(opts.gatewayAudiences)),
			kubeauth.NewAuthorizer(c, opts.authLimits.authz()),
			gateway.CachedServerNames(mgr.GetCache(), opts.watchNamespaces),
			kubeauth.Options{}).WithMaxServerReviewsPerRequest(opts.authLimits.AccessReviewsPerRequest)
	}
	getCertificate, err := gatewayCertificate(mgr, opts)
	if err != nil {
		return nil, err
	}
	if getCertificate != nil {
		gw.TLS = gateway.TLSConfig(getCertificate)
	}
	// Bound now: a replica's readiness may pass before its gateway's server
	// starts, and the kernel then holds the Service's first connections.
	ln, err := net.Listen("tcp", opts.gatewayAddr)
	if err != nil {
		return nil, fmt.Errorf("--gateway-bind-address=%s: %w", opts.gatewayAddr, err)
	}
	return gw, gw.AddToManager(mgr, ln)
}

// cacheOptions restricts the informers to the watched namespaces, if any.
func cacheOptions(namespaces []string) cache.Options {
	if len(namespaces) == 0 {
		return cache.Options{}
	}
	nsMap := make(map[string]cache.Config, len(namespaces))
	for _, ns := range namespaces {
		nsMap[ns] = cache.Config{}
	}
	return cache.Options{DefaultNamespaces: nsMap}
}
