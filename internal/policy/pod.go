package policy

import (
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

// Pod is the resolved Pod runtime of a stdio server: what its Pod runs,
// besides Stdio's command, args and cwd. See docs/design.md, "The server's
// Pod".
type Pod struct {
	Image string
	// ImagePullPolicy is the spec's, IfNotPresent when it is unset.
	ImagePullPolicy corev1.PullPolicy
	// Resources are the spec's combined with the defaults (CombineResources).
	Resources corev1.ResourceRequirements
	// ServiceAccountName is empty for none: no token is mounted then.
	ServiceAccountName string
	// Env is the spec's env as the container's env: literal values and
	// references that the kubelet resolves, never a resolved Secret value.
	// Stdio.Env holds the resolved values, so that a rotated Secret still
	// changes the policy's fingerprint.
	Env []corev1.EnvVar
}

// Default requests and limits of the server's container.
const (
	DefaultCPURequest    = "50m"
	DefaultMemoryRequest = "64Mi"
	DefaultCPULimit      = "500m"
	DefaultMemoryLimit   = "256Mi"
)

// DefaultImagePullPolicy applies when spec.stdio.imagePullPolicy is unset.
const DefaultImagePullPolicy = corev1.PullIfNotPresent

const maxImageLen = 1024

// podResources are the resources spec.stdio.resources may name.
var podResources = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage}

// CombineResources is the server container's resources: the spec's requests
// and limits, and for cpu and memory the default of each side (request,
// limit) the spec leaves out. A default that would break requests <= limits
// is moved to the spec's value of the other side: a spec limit below the
// default request is also the request, a spec request above the default
// limit is also the limit. spec may be nil.
func CombineResources(spec *corev1.ResourceRequirements) corev1.ResourceRequirements {
	out := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	if spec != nil {
		for name, q := range spec.Requests {
			out.Requests[name] = q.DeepCopy()
		}
		for name, q := range spec.Limits {
			out.Limits[name] = q.DeepCopy()
		}
	}
	defaults := []struct {
		name       corev1.ResourceName
		req, limit string
	}{
		{corev1.ResourceCPU, DefaultCPURequest, DefaultCPULimit},
		{corev1.ResourceMemory, DefaultMemoryRequest, DefaultMemoryLimit},
	}
	for _, d := range defaults {
		req, hasReq := out.Requests[d.name]
		limit, hasLimit := out.Limits[d.name]
		if !hasReq {
			req = resource.MustParse(d.req)
			if hasLimit && req.Cmp(limit) > 0 {
				req = limit.DeepCopy()
			}
			out.Requests[d.name] = req
		}
		if !hasLimit {
			limit = resource.MustParse(d.limit)
			if limit.Cmp(req) < 0 {
				limit = req.DeepCopy()
			}
			out.Limits[d.name] = limit
		}
	}
	return out
}

// runtime selects the server's runtime and checks the fields that depend on
// it: Pod-only fields are refused for a Local server, and a Pod server's
// fields are checked as the apiserver would check its Deployment.
func (r *resolver) runtime(path *field.Path, s *v1alpha1.StdioTransport, out *Stdio) {
	if s.Image != "" {
		r.image(path.Child("image"), s.Image)
	}
	r.resources(path.Child("resources"), s.Resources)
	if s.ServiceAccountName != "" {
		for _, msg := range validation.IsDNS1123Subdomain(s.ServiceAccountName) {
			r.errs = append(r.errs, field.Invalid(path.Child("serviceAccountName"), s.ServiceAccountName, msg))
		}
	}
	pull := s.ImagePullPolicy
	switch pull {
	case "":
		pull = DefaultImagePullPolicy
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		r.errs = append(r.errs, field.NotSupported(path.Child("imagePullPolicy"), s.ImagePullPolicy,
			[]corev1.PullPolicy{corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever}))
	}

	sel, ferr := SelectRuntime(r.rt, r.namespace, s.Image, s.Command)
	if ferr != nil {
		r.errs = append(r.errs, ferr)
		return
	}
	out.Runtime = sel.Runtime
	if sel.Runtime == v1alpha1.RuntimeLocal {
		r.podOnly(path, s)
		return
	}
	r.podFields(path, s)
	out.Pod = &Pod{
		Image:              sel.Image,
		ImagePullPolicy:    pull,
		Resources:          CombineResources(s.Resources),
		ServiceAccountName: s.ServiceAccountName,
		Env:                envCopy(s.Env),
	}
}

// podOnly refuses the Pod-only fields whose silent absence would matter on
// a server that runs Local: a limit or an identity the user counts on. An
// imagePullPolicy is harmless there (no image is pulled), so a manifest
// written for a Pod cluster still runs where Local is allowed.
func (r *resolver) podOnly(path *field.Path, s *v1alpha1.StdioTransport) {
	const why = "applies only to the Pod runtime, and this server runs as a child of the manager " +
		"(spec.stdio.image is unset and its namespace allows the Local runtime); set spec.stdio.image to run it in its own Pod"
	if !resourcesEmpty(s.Resources) {
		r.errs = append(r.errs, field.Forbidden(path.Child("resources"), why))
	}
	if s.ServiceAccountName != "" {
		r.errs = append(r.errs, field.Forbidden(path.Child("serviceAccountName"), why))
	}
}

// podFields checks what the Pod's container takes from the spec as the
// apiserver would, so that a bad value is an invalid spec and not a
// Deployment the apiserver refuses.
func (r *resolver) podFields(path *field.Path, s *v1alpha1.StdioTransport) {
	if s.Cwd != "" && !strings.HasPrefix(s.Cwd, "/") {
		r.errs = append(r.errs, field.Invalid(path.Child("cwd"), s.Cwd,
			"must be an absolute path in the Pod runtime: it becomes the container's workingDir"))
	}
	for i := range s.Env {
		if s.Env[i].Name == "" {
			continue // refused already
		}
		for _, msg := range validation.IsRelaxedEnvVarName(s.Env[i].Name) {
			r.errs = append(r.errs, field.Invalid(path.Child("env").Index(i).Child("name"), s.Env[i].Name, msg))
		}
	}
}

// image checks a reference as the kubelet parses it.
func (r *resolver) image(path *field.Path, image string) {
	if utf8.RuneCountInString(image) > maxImageLen {
		r.errs = append(r.errs, field.TooLongCharacters(path, "", maxImageLen))
		return
	}
	if _, err := reference.ParseNormalizedNamed(image); err != nil {
		r.errs = append(r.errs, field.Invalid(path, image,
			"must be an image reference such as ghcr.io/org/server:1.2 or registry/name@sha256:<digest> ("+err.Error()+")"))
	}
}

func (r *resolver) resources(path *field.Path, res *corev1.ResourceRequirements) {
	if res == nil {
		return
	}
	if len(res.Claims) > 0 {
		r.errs = append(r.errs, field.Forbidden(path.Child("claims"), "not supported: the server's Pod has no resource claims"))
	}
	for _, side := range []struct {
		name string
		list corev1.ResourceList
	}{{"requests", res.Requests}, {"limits", res.Limits}} {
		for _, name := range sortedNames(side.list) {
			q := side.list[name]
			p := path.Child(side.name).Key(string(name))
			switch {
			case !slices.Contains(podResources, name):
				r.errs = append(r.errs, field.NotSupported(p, name, podResources))
			case q.Sign() < 0:
				r.errs = append(r.errs, field.Invalid(p, q.String(), "must not be negative"))
			}
		}
	}
	for _, name := range sortedNames(res.Requests) {
		req := res.Requests[name]
		if limit, ok := res.Limits[name]; ok && req.Cmp(limit) > 0 {
			r.errs = append(r.errs, field.Invalid(path.Child("requests").Key(string(name)), req.String(),
				"must be less than or equal to the limit "+limit.String()))
		}
	}
}

func sortedNames(l corev1.ResourceList) []corev1.ResourceName {
	names := make([]corev1.ResourceName, 0, len(l))
	for n := range l {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func resourcesEmpty(res *corev1.ResourceRequirements) bool {
	return res == nil || (len(res.Requests) == 0 && len(res.Limits) == 0 && len(res.Claims) == 0)
}

func envCopy(env []corev1.EnvVar) []corev1.EnvVar {
	if len(env) == 0 {
		return nil
	}
	out := make([]corev1.EnvVar, len(env))
	for i := range env {
		env[i].DeepCopyInto(&out[i])
	}
	return out
}
