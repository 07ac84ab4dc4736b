package peer

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/mcpbridge/operator/internal/certs"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/internal/tracing"
)

// Config is what a replica needs to serve its endpoint and to forward.
type Config struct {
	// Name is the replica's name (--replica-name): its certificate's
	// common name.
	Name string
	// Namespace is the manager's namespace, which holds the CA Secret.
	Namespace string
	// BindAddress is the endpoint's listen address (--replica-bind-address).
	BindAddress string
	// CASecretName names the CA Secret; empty is DefaultCASecretName.
	CASecretName string
	// Client creates the CA Secret when there is none.
	Client client.Client
	// Reader reads the CA Secret, uncached (the manager's API reader);
	// nil is Client.
	Reader client.Reader
	// Local finds the local caller of an owner's tool set.
	Local LocalFunc
	// Ended, when set, is given the agent sessions another replica ended
	// (POST EndedPath; without it that route is 404): SessionEnds.Received.
	Ended func([]EndedSession)
	// Results, when set, is the budget of result bytes of a namespace that
	// a call forwarded here counts what it reads into, and the func that
	// gives back what the call still holds (the gateway's ResultBytes):
	// the owner reads an upstream's answer whole before it sends it on, so
	// it holds what the forwarding replica's budget counts only as it
	// arrives. Nil: uncounted. See docs/design.md, "Budgets".
	Results func(namespace string) (registry.ResultBytes, func())
	// Log is the logger of the endpoint and the client; zero is
	// ctrl.Log's "peer".
	Log logr.Logger
	// TracerProvider records the forwards' spans; nil is off.
	TracerProvider trace.TracerProvider

	// CertValidity is each replica certificate's validity, and
	// CertRenewBefore how long before expiry it is re-issued; zero are
	// 2 h and 1 h.
	CertValidity, CertRenewBefore time.Duration
	// CertRetryDelay is the wait after a failed issue; zero is 10 s.
	CertRetryDelay time.Duration
	// ShutdownTimeout bounds how long calls in flight may finish once the
	// manager stops; zero is DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
}

// Replica is one replica's side of forwarding: its certificate, the
// endpoint other replicas call and the client it calls them with.
type Replica struct {
	cert     *certs.ServingCert
	endpoint *Endpoint
	client   *Client
}

// New builds a replica's certificate, endpoint and client; AddToManager
// runs them.
func New(cfg Config) (*Replica, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	secret := &certs.CASecret{Reader: cfg.Reader, Writer: cfg.Client,
		Key:        client.ObjectKey{Namespace: cfg.Namespace, Name: cfg.CASecretName},
		CommonName: caCommonName, Validity: caValidity,
		Labels: map[string]string{"app.kubernetes.io/name": "mcpbridge", "app.kubernetes.io/component": "replica-ca"}}
	cert := &certs.ServingCert{Load: (&lastCA{load: secret.Load}).Load, RenewBefore: cfg.CertRenewBefore, RetryDelay: cfg.CertRetryDelay,
		Request: certs.Request{CommonName: cfg.Name, DNSNames: []string{ServerName}, Usage: certs.ServerAndClientAuth,
			Validity: cfg.CertValidity}}
	id := &identity{cert: cert}
	tracer := tracing.New(cfg.TracerProvider)
	return &Replica{cert: cert, endpoint: newEndpoint(&cfg, id, tracer), client: newClient(id, tracer, cfg.Log)}, nil
}

func (cfg *Config) defaults() error {
	switch {
	case cfg.Name == "" || cfg.Namespace == "" || cfg.BindAddress == "":
		return errors.New("a replica's endpoint needs its name, the manager's namespace and a bind address")
	case cfg.Client == nil || cfg.Local == nil:
		return errors.New("a replica's endpoint needs a client for its CA Secret and a lookup of local callers")
	}
	cfg.CASecretName = cmp.Or(cfg.CASecretName, DefaultCASecretName)
	if cfg.Reader == nil {
		cfg.Reader = cfg.Client
	}
	if cfg.Log.GetSink() == nil {
		cfg.Log = ctrl.Log.WithName("peer")
	}
	cfg.CertValidity = cmp.Or(cfg.CertValidity, defaultCertValidity)
	cfg.CertRenewBefore = cmp.Or(cfg.CertRenewBefore, defaultCertRenewBefore)
	cfg.CertRetryDelay = cmp.Or(cfg.CertRetryDelay, defaultCertRetryDelay)
	cfg.ShutdownTimeout = cmp.Or(cfg.ShutdownTimeout, DefaultShutdownTimeout)
	if cfg.CertRenewBefore >= cfg.CertValidity {
		return fmt.Errorf("a replica certificate's renewal margin (%s) must be less than its validity (%s)", cfg.CertRenewBefore, cfg.CertValidity)
	}
	return nil
}

// Runnables are what AddToManager adds: the certificate's renewal and the
// endpoint, both on every replica.
func (r *Replica) Runnables() []manager.Runnable { return []manager.Runnable{r.cert, r.endpoint} }

// AddToManager runs the replica's certificate and endpoint with mgr.
func (r *Replica) AddToManager(mgr manager.Manager) error {
	for _, run := range r.Runnables() {
		if err := mgr.Add(run); err != nil {
			return err
		}
	}
	return nil
}

// Endpoint is the replica's endpoint.
func (r *Replica) Endpoint() *Endpoint { return r.endpoint }

// Client forwards calls to the other replicas.
func (r *Replica) Client() *Client { return r.client }

// Issued is closed once the replica has its first certificate: before,
// its endpoint refuses every handshake and its client cannot dial.
func (r *Replica) Issued() <-chan struct{} { return r.cert.Issued() }
