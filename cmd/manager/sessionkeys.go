package main

import (
	"flag"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mcpbridge/operator/internal/gateway"
	"github.com/mcpbridge/operator/internal/sessionkeys"
)

// The key ring the gateway seals 2025-11-25 session ids with, in a Secret
// of the manager's namespace; see docs/design.md, "Sessions on every
// replica".
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update

// sessionKeyOptions say where the ring is kept and how it turns.
type sessionKeyOptions struct {
	secretName  string
	rotateEvery time.Duration
	honourFor   time.Duration
}

func (o *sessionKeyOptions) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.secretName, "gateway-session-key-secret", sessionkeys.DefaultSecretName,
		"Secret of the manager's namespace that holds the keys agent session ids are sealed with; the manager creates it.")
	fs.DurationVar(&o.rotateEvery, "gateway-session-key-rotation", sessionkeys.DefaultRotateEvery,
		"How often a new session key becomes current.")
	fs.DurationVar(&o.honourFor, "gateway-session-key-retention", sessionkeys.DefaultHonourFor,
		"How long a session key is still honoured after the next one became current, and how long after its start a session "+
			"may go on on another replica.")
}

// minSessionKeyPeriod: a ring that turns faster would retire keys while the
// replicas are still learning them (they read the Secret every minute).
const minSessionKeyPeriod = 10 * time.Minute

func (o *sessionKeyOptions) validate() error {
	if o.rotateEvery < minSessionKeyPeriod || o.honourFor < minSessionKeyPeriod {
		return fmt.Errorf("--gateway-session-key-rotation=%s and --gateway-session-key-retention=%s must be at least %s",
			o.rotateEvery, o.honourFor, minSessionKeyPeriod)
	}
	return nil
}

// addSessionKeys adds the ring to mgr on every replica, with a readiness
// check that passes once it is loaded, and has gw seal with it and take up
// sessions for as long as their keys are honoured. Outside a cluster
// without --manager-namespace there is no Secret to share, and gw seals
// with a key of its own process.
func addSessionKeys(mgr ctrl.Manager, gw *gateway.Gateway, o *sessionKeyOptions, managerNamespace string) error {
	gw.SessionMaxAge = o.honourFor
	if managerNamespace == "" {
		return nil
	}
	ring := sessionkeys.New(mgr.GetClient(), managerNamespace, o.secretName, o.rotateEvery, o.honourFor).
		WithReader(mgr.GetAPIReader()) // the manager caches no Secret of its own namespace
	if err := mgr.Add(ring); err != nil {
		return fmt.Errorf("keep the session keys: %w", err)
	}
	if err := mgr.AddReadyzCheck("session-keys", ring.Check); err != nil {
		return fmt.Errorf("add the session keys' readiness check: %w", err)
	}
	gw.SessionKeys = ring
	return nil
}
