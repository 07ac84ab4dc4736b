package policy

import (
	"cmp"
	"errors"
	"math"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

// Defaults, applied when a field is unset.
// See docs/design.md, "The McpServer resource".
const (
	DefaultToolCallTimeoutMs     = 60000
	DefaultConnectionTimeoutMs   = 60000
	DefaultHealthCheckIntervalMs = 30000
	DefaultInitialDelayMs        = 500
	DefaultMaxDelayMs            = 30000
	DefaultMaxAttempts           = 10
)

// Limits the CRD schema also enforces.
const (
	maxCommandLen   = 4096
	maxArgs         = 256
	maxArgLen       = 32768
	maxEnv          = 256
	maxCwdLen       = 4096
	maxURLLen       = 2048
	maxHeaders      = 64
	maxHeaderName   = 256
	maxHeaderValue  = 8192
	serverNameRegex = `^[A-Za-z0-9_-]{1,32}$`
)

var (
	serverNameRE = regexp.MustCompile(serverNameRegex)
	headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// InvalidSpecError lists every rule a spec breaks, each with its field path.
type InvalidSpecError struct{ Errs field.ErrorList }

func (e *InvalidSpecError) Error() string { return e.Errs.ToAggregate().Error() }

// Resolve turns a spec into the policy a supervisor runs. namespace and name
// are the resource's (name is the serverName default; namespace decides the
// runtime of a stdio server with rt). It returns an *InvalidSpecError when a
// rule is broken and a *MissingRefError when a required Secret or ConfigMap
// value is absent from values.
func Resolve(namespace, name string, spec *v1alpha1.McpServerSpec, values Values, rt RuntimeConfig) (*Policy, error) {
	r := resolver{values: values, namespace: namespace, rt: rt}
	p := r.resolve(name, spec)
	if len(r.errs) > 0 {
		return nil, &InvalidSpecError{Errs: r.errs}
	}
	if r.missing != nil {
		return nil, r.missing
	}
	return p, nil
}

// IsInvalidSpec reports whether err is an *InvalidSpecError.
func IsInvalidSpec(err error) bool {
	var e *InvalidSpecError
	return errors.As(err, &e)
}

type resolver struct {
	values    Values
	namespace string
	rt        RuntimeConfig
	errs      field.ErrorList
	missing   *MissingRefError
}

func (r *resolver) resolve(name string, spec *v1alpha1.McpServerSpec) *Policy {
	root := field.NewPath("spec")
	p := &Policy{
		ServerName:          r.serverName(root.Child("serverName"), spec, name),
		Transport:           spec.Transport,
		ToolCallTimeout:     r.millis(root.Child("toolCallTimeoutMs"), spec.ToolCallTimeoutMs, DefaultToolCallTimeoutMs, 1),
		ConnectionTimeout:   r.millis(root.Child("connectionTimeoutMs"), spec.ConnectionTimeoutMs, DefaultConnectionTimeoutMs, 1),
		HealthCheckInterval: r.millis(root.Child("healthCheckIntervalMs"), spec.HealthCheckIntervalMs, DefaultHealthCheckIntervalMs, 0),
		FailOnStartupError:  spec.FailOnStartupError != nil && *spec.FailOnStartupError,
		Reconnect:           r.reconnect(root.Child("reconnect"), spec.Reconnect),
		Tools:               r.tools(root.Child("tools"), spec.Tools),
	}
	r.limits(root, spec, p)
	r.transport(root, spec, p)
	p.SuspendAfter = r.suspendAfter(root.Child("idle", "suspendAfterMs"), spec)
	return p
}

// ServerName is the effective serverName: spec.serverName, or the resource's
// metadata.name when unset. Resolve checks it; the controller also needs it
// before resolving, to find which resource holds a serverName.
func ServerName(name string, spec *v1alpha1.McpServerSpec) string {
	return cmp.Or(spec.ServerName, name)
}

func (r *resolver) serverName(path *field.Path, spec *v1alpha1.McpServerSpec, name string) string {
	serverName := ServerName(name, spec)
	switch {
	case serverNameRE.MatchString(serverName):
	case spec.ServerName == "":
		r.errs = append(r.errs, field.Required(path,
			"required when metadata.name does not match "+serverNameRegex))
	default:
		r.errs = append(r.errs, field.Invalid(path, serverName, "must match "+serverNameRegex))
	}
	return serverName
}

// millis checks min..MaxInt32 and applies the default when unset.
func (r *resolver) millis(path *field.Path, v *int32, def, min int64) time.Duration {
	ms := def
	if v != nil {
		ms = int64(*v)
	}
	if ms < min || ms > math.MaxInt32 {
		r.errs = append(r.errs, field.Invalid(path, ms, "must be between "+itoa(min)+" and 2147483647"))
	}
	return time.Duration(ms) * time.Millisecond
}

func (r *resolver) reconnect(path *field.Path, rp *v1alpha1.ReconnectPolicy) Reconnect {
	if rp == nil {
		rp = &v1alpha1.ReconnectPolicy{}
	}
	out := Reconnect{
		Enabled:      rp.Enabled == nil || *rp.Enabled,
		InitialDelay: r.millis(path.Child("initialDelayMs"), rp.InitialDelayMs, DefaultInitialDelayMs, 1),
		MaxDelay:     r.millis(path.Child("maxDelayMs"), rp.MaxDelayMs, DefaultMaxDelayMs, 1),
		MaxAttempts:  DefaultMaxAttempts,
	}
	if rp.MaxAttempts != nil {
		out.MaxAttempts = int(*rp.MaxAttempts)
		if out.MaxAttempts < 1 {
			r.errs = append(r.errs, field.Invalid(path.Child("maxAttempts"), out.MaxAttempts, "must be at least 1"))
		}
	}
	if out.InitialDelay > out.MaxDelay {
		r.errs = append(r.errs, field.Invalid(path.Child("initialDelayMs"), out.InitialDelay.Milliseconds(),
			"must be less than or equal to spec.reconnect.maxDelayMs"))
	}
	return out
}

func (r *resolver) transport(root *field.Path, spec *v1alpha1.McpServerSpec, p *Policy) {
	stdioPath, httpPath := root.Child("stdio"), root.Child("streamableHttp")
	switch spec.Transport {
	case v1alpha1.TransportStdio:
		if spec.StreamableHTTP != nil {
			r.errs = append(r.errs, field.Forbidden(httpPath, "forbidden unless spec.transport is streamable-http"))
		}
		if spec.Stdio == nil {
			r.errs = append(r.errs, field.Required(stdioPath, "required when spec.transport is stdio"))
			return
		}
		p.Stdio = r.stdio(stdioPath, spec.Stdio)
	case v1alpha1.TransportStreamableHTTP:
		if spec.Stdio != nil {
			r.errs = append(r.errs, field.Forbidden(stdioPath, "forbidden unless spec.transport is stdio"))
		}
		if spec.StreamableHTTP == nil {
			r.errs = append(r.errs, field.Required(httpPath, "required when spec.transport is streamable-http"))
			return
		}
		p.HTTP = r.http(httpPath, spec.StreamableHTTP)
	default:
		r.errs = append(r.errs, field.NotSupported(root.Child("transport"), spec.Transport,
			[]v1alpha1.Transport{v1alpha1.TransportStdio, v1alpha1.TransportStreamableHTTP}))
	}
}

func (r *resolver) stdio(path *field.Path, s *v1alpha1.StdioTransport) *Stdio {
	out := &Stdio{Command: s.Command, Args: append([]string(nil), s.Args...), Cwd: s.Cwd}
	r.length(path.Child("command"), s.Command, 1, maxCommandLen)
	if len(s.Args) > maxArgs {
		r.errs = append(r.errs, field.TooMany(path.Child("args"), len(s.Args), maxArgs))
	}
	for i, a := range s.Args {
		r.length(path.Child("args").Index(i), a, 0, maxArgLen)
	}
	r.length(path.Child("cwd"), s.Cwd, 0, maxCwdLen)
	if len(s.Env) > maxEnv {
		r.errs = append(r.errs, field.TooMany(path.Child("env"), len(s.Env), maxEnv))
	}
	seen := map[string]bool{}
	for i := range s.Env {
		e := &s.Env[i]
		p := path.Child("env").Index(i)
		if e.Name == "" || strings.Contains(e.Name, "=") {
			r.errs = append(r.errs, field.Invalid(p.Child("name"), e.Name, "must be non-empty and have no '='"))
		} else if seen[e.Name] {
			r.errs = append(r.errs, field.Duplicate(p.Child("name"), e.Name))
		}
		seen[e.Name] = true
		if v, ok := r.envValue(p, e); ok {
			out.Env = append(out.Env, EnvVar{Name: e.Name, Value: v})
		}
	}
	r.runtime(path, s, out)
	return out
}

// envValue returns the entry's value, or ok=false when an optional
// reference is absent and the variable is left unset.
func (r *resolver) envValue(path *field.Path, e *corev1.EnvVar) (string, bool) {
	vf := e.ValueFrom
	if vf == nil {
		return e.Value, true
	}
	vfPath := path.Child("valueFrom")
	if e.Value != "" {
		r.errs = append(r.errs, field.Invalid(path.Child("value"), "", "may not be set together with valueFrom"))
	}
	if vf.FieldRef != nil || vf.ResourceFieldRef != nil || vf.FileKeyRef != nil {
		r.errs = append(r.errs, field.Forbidden(vfPath, "only secretKeyRef and configMapKeyRef are supported"))
		return "", false
	}
	switch {
	case vf.SecretKeyRef != nil && vf.ConfigMapKeyRef != nil:
		r.errs = append(r.errs, field.Invalid(vfPath, "", "must set exactly one of secretKeyRef or configMapKeyRef"))
	case vf.SecretKeyRef != nil:
		s := vf.SecretKeyRef
		return r.lookup(vfPath.Child("secretKeyRef"), Ref{SecretRef, s.Name, s.Key}, s.Optional)
	case vf.ConfigMapKeyRef != nil:
		c := vf.ConfigMapKeyRef
		return r.lookup(vfPath.Child("configMapKeyRef"), Ref{ConfigMapRef, c.Name, c.Key}, c.Optional)
	default:
		r.errs = append(r.errs, field.Required(vfPath, "must set secretKeyRef or configMapKeyRef"))
	}
	return "", false
}

func (r *resolver) lookup(path *field.Path, ref Ref, optional *bool) (string, bool) {
	if ref.Name == "" {
		r.errs = append(r.errs, field.Required(path.Child("name"), ""))
	}
	if ref.Key == "" {
		r.errs = append(r.errs, field.Required(path.Child("key"), ""))
	}
	if ref.Name == "" || ref.Key == "" {
		return "", false
	}
	v, ok := r.values[ref]
	if !ok && (optional == nil || !*optional) && r.missing == nil {
		r.missing = &MissingRefError{Field: path.String(), Ref: ref}
	}
	return v, ok
}

func (r *resolver) http(path *field.Path, h *v1alpha1.StreamableHTTPTransport) *HTTP {
	out := &HTTP{URL: h.URL}
	r.url(path.Child("url"), h.URL)
	if len(h.Headers) > maxHeaders {
		r.errs = append(r.errs, field.TooMany(path.Child("headers"), len(h.Headers), maxHeaders))
	}
	seen := map[string]bool{}
	for i := range h.Headers {
		hp := path.Child("headers").Index(i)
		hdr := &h.Headers[i]
		r.headerName(hp.Child("name"), hdr.Name, seen)
		if v, ok := r.headerValue(hp, hdr); ok {
			out.Headers = append(out.Headers, Header{Name: hdr.Name, Value: v})
		}
	}
	return out
}

func (r *resolver) url(path *field.Path, raw string) {
	r.length(path, raw, 1, maxURLLen)
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		// Not echoing the value: a URL can carry a password.
		r.errs = append(r.errs, field.Invalid(path, "<redacted>", "must be an absolute http or https URL"))
	}
}

func (r *resolver) headerName(path *field.Path, name string, seen map[string]bool) {
	switch {
	case len(name) > maxHeaderName:
		r.errs = append(r.errs, field.TooLong(path, "", maxHeaderName))
	case !headerNameRE.MatchString(name):
		r.errs = append(r.errs, field.Invalid(path, name, "must be an HTTP token"))
	case seen[strings.ToLower(name)]:
		r.errs = append(r.errs, field.Duplicate(path, name))
	}
	seen[strings.ToLower(name)] = true
}

func (r *resolver) headerValue(path *field.Path, h *v1alpha1.HTTPHeader) (string, bool) {
	var v string
	var ok bool
	switch {
	case (h.Value == nil) == (h.ValueFrom == nil):
		r.errs = append(r.errs, field.Invalid(path, "", "must set exactly one of value or valueFrom"))
		return "", false
	case h.Value != nil:
		v, ok = *h.Value, true
		if utf8.RuneCountInString(v) > maxHeaderValue {
			r.errs = append(r.errs, field.TooLongCharacters(path.Child("value"), "", maxHeaderValue))
		}
		path = path.Child("value")
	default:
		s := h.ValueFrom.SecretKeyRef
		path = path.Child("valueFrom", "secretKeyRef")
		v, ok = r.lookup(path, Ref{SecretRef, s.Name, s.Key}, s.Optional)
	}
	if strings.ContainsAny(v, "\r\n") {
		// The value itself may be a secret: never echo it.
		r.errs = append(r.errs, field.Invalid(path, "<redacted>", "header value must not contain line breaks"))
	}
	return v, ok
}

// length counts characters, as the CRD's minLength/maxLength do.
func (r *resolver) length(path *field.Path, v string, min, max int) {
	switch n := utf8.RuneCountInString(v); {
	case n < min:
		r.errs = append(r.errs, field.Required(path, "must not be empty"))
	case n > max:
		r.errs = append(r.errs, field.TooLongCharacters(path, "", max))
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
