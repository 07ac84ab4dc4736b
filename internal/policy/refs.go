package policy

import (
	"fmt"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

// RefKind is the kind of object a value is read from.
type RefKind string

const (
	SecretRef    RefKind = "Secret"
	ConfigMapRef RefKind = "ConfigMap"
)

// Ref names one key of a Secret or ConfigMap in the resource's namespace.
type Ref struct {
	Kind RefKind
	Name string
	Key  string
}

func (r Ref) String() string { return fmt.Sprintf("%s %q key %q", r.Kind, r.Name, r.Key) }

// Values holds the resolved values of a spec's references. A Ref that is
// absent means the object or its key does not exist.
type Values map[Ref]string

// Refs lists the references a spec makes, once each and in spec order, so
// the caller knows what to read before calling Resolve.
func Refs(spec *v1alpha1.McpServerSpec) []Ref {
	var refs []Ref
	seen := map[Ref]bool{}
	add := func(r Ref) {
		if r.Name != "" && r.Key != "" && !seen[r] {
			seen[r] = true
			refs = append(refs, r)
		}
	}
	if spec.Stdio != nil {
		for _, e := range spec.Stdio.Env {
			if e.ValueFrom == nil {
				continue
			}
			if s := e.ValueFrom.SecretKeyRef; s != nil {
				add(Ref{SecretRef, s.Name, s.Key})
			}
			if c := e.ValueFrom.ConfigMapKeyRef; c != nil {
				add(Ref{ConfigMapRef, c.Name, c.Key})
			}
		}
	}
	if spec.StreamableHTTP != nil {
		for _, h := range spec.StreamableHTTP.Headers {
			if h.ValueFrom != nil {
				s := h.ValueFrom.SecretKeyRef
				add(Ref{SecretRef, s.Name, s.Key})
			}
		}
	}
	return refs
}

// MissingRefError says that a required reference could not be resolved. It
// is not an invalid spec: it heals by itself once the object exists.
type MissingRefError struct {
	Field string
	Ref   Ref
}

func (e *MissingRefError) Error() string {
	return fmt.Sprintf("%s: %s was not found", e.Field, e.Ref)
}
