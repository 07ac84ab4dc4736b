package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"time"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

// Policy is everything a supervisor needs to run one server, with defaults
// applied and references resolved. Treat it as immutable: a change of any
// field is a hot swap.
type Policy struct {
	ServerName          string
	Transport           v1alpha1.Transport
	Stdio               *Stdio
	HTTP                *HTTP
	ToolCallTimeout     time.Duration
	ConnectionTimeout   time.Duration
	HealthCheckInterval time.Duration // 0 disables the probe
	FailOnStartupError  bool
	Reconnect           Reconnect
	// Tools filters what is published. A supervisor changes it in place
	// (see ConnectionFingerprint).
	Tools ToolFilter
	// SuspendAfter is how long a stdio server stays connected without a
	// tools/call before it sleeps; 0 never. A supervisor changes it in
	// place. See docs/design.md, "Idle servers".
	SuspendAfter time.Duration
}

// Stdio is a resolved stdio transport.
type Stdio struct {
	Command string
	Args    []string
	Env     []EnvVar // only the spec's entries; the allowlist is the supervisor's
	Cwd     string
	// Runtime is where the process runs (see docs/design.md, "Choosing a
	// runtime"); switching it, like any field, is a hot swap.
	Runtime v1alpha1.Runtime
	// Pod is set iff Runtime is Pod.
	Pod *Pod
}

// EnvVar is one resolved variable; Value may be a secret.
type EnvVar struct {
	Name  string
	Value string
}

// HTTP is a resolved Streamable HTTP transport.
type HTTP struct {
	URL     string
	Headers []Header
}

// Header is one resolved request header; Value may be a secret.
type Header struct {
	Name  string
	Value string
}

// Reconnect is the resolved backoff policy.
// See docs/design.md, "Backoff and the attempt budget".
type Reconnect struct {
	Enabled      bool
	InitialDelay time.Duration
	MaxDelay     time.Duration
	MaxAttempts  int
}

// Fingerprint is a stable digest of the whole policy, secret values included,
// so that a rotated Secret is noticed without keeping the value around.
func (p *Policy) Fingerprint() string {
	b, err := json.Marshal(p)
	if err != nil {
		panic(fmt.Sprintf("policy: marshal: %v", err)) // plain data cannot fail
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// ConnectionFingerprint is Fingerprint without the tool filter and the idle
// policy: it changes exactly when the connection has to be rebuilt, while a
// new filter alone only changes what is published, and a new suspendAfterMs
// only when the server sleeps.
// See docs/design.md, "Tool sync" and "Idle servers".
func (p *Policy) ConnectionFingerprint() string {
	c := *p
	c.Tools, c.SuspendAfter = ToolFilter{}, 0
	return c.Fingerprint()
}

// String never prints a value that could be a secret.
func (p *Policy) String() string {
	b, _ := json.Marshal(p.redacted())
	return string(b)
}

// MarshalLog keeps secret values out of structured logs (logr.Marshaler).
func (p *Policy) MarshalLog() any { return p.redacted() }

type redactedPolicy struct {
	ServerName          string
	Transport           v1alpha1.Transport
	Command             string           `json:",omitempty"`
	Args                []string         `json:",omitempty"`
	EnvNames            []string         `json:",omitempty"`
	Runtime             v1alpha1.Runtime `json:",omitempty"`
	Image               string           `json:",omitempty"`
	URL                 string           `json:",omitempty"`
	HeaderNames         []string         `json:",omitempty"`
	ToolCallTimeout     string
	ConnectionTimeout   string
	HealthCheckInterval string
	FailOnStartupError  bool
	Reconnect           Reconnect
	Tools               *ToolFilter `json:",omitempty"`
	SuspendAfter        string      `json:",omitempty"`
}

func (p *Policy) redacted() redactedPolicy {
	r := redactedPolicy{
		ServerName:          p.ServerName,
		Transport:           p.Transport,
		ToolCallTimeout:     p.ToolCallTimeout.String(),
		ConnectionTimeout:   p.ConnectionTimeout.String(),
		HealthCheckInterval: p.HealthCheckInterval.String(),
		FailOnStartupError:  p.FailOnStartupError,
		Reconnect:           p.Reconnect,
	}
	if !p.Tools.Empty() {
		r.Tools = &p.Tools
	}
	if p.SuspendAfter > 0 {
		r.SuspendAfter = p.SuspendAfter.String()
	}
	if p.Stdio != nil {
		r.Command, r.Args, r.Runtime = p.Stdio.Command, p.Stdio.Args, p.Stdio.Runtime
		if p.Stdio.Pod != nil {
			r.Image = p.Stdio.Pod.Image
		}
		for _, e := range p.Stdio.Env {
			r.EnvNames = append(r.EnvNames, e.Name)
		}
	}
	if p.HTTP != nil {
		r.URL = redactURL(p.HTTP.URL)
		for _, h := range p.HTTP.Headers {
			r.HeaderNames = append(r.HeaderNames, h.Name)
		}
	}
	return r
}

// redactURL hides a password in the URL's user info.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparseable>"
	}
	return u.Redacted()
}
