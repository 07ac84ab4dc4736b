package policy

import (
	"path"
	"slices"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

// Limits of spec.tools the CRD schema also enforces.
const (
	maxToolGlobs   = 64
	maxToolGlobLen = 256
)

// ToolFilter is the resolved spec.tools: path.Match patterns over raw tool
// names, checked at resolve time. The zero value publishes every tool.
// See docs/design.md, "Tool sync".
type ToolFilter struct {
	Include []string `json:",omitempty"`
	Exclude []string `json:",omitempty"`
}

// Empty reports whether f publishes every tool.
func (f ToolFilter) Empty() bool { return len(f.Include) == 0 && len(f.Exclude) == 0 }

// Equal reports whether f and o list the same patterns in the same order.
func (f ToolFilter) Equal(o ToolFilter) bool {
	return slices.Equal(f.Include, o.Include) && slices.Equal(f.Exclude, o.Exclude)
}

// Allows reports whether the tool rawName is published: it matches an
// include pattern, or include is empty, and matches no exclude pattern.
func (f ToolFilter) Allows(rawName string) bool {
	if len(f.Include) > 0 && !matchesAny(f.Include, rawName) {
		return false
	}
	return !matchesAny(f.Exclude, rawName)
}

// matchesAny ignores errors: Resolve refused every bad pattern.
func matchesAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

func (r *resolver) tools(p *field.Path, t *v1alpha1.ToolFilter) ToolFilter {
	if t == nil {
		return ToolFilter{}
	}
	return ToolFilter{
		Include: r.globs(p.Child("include"), t.Include),
		Exclude: r.globs(p.Child("exclude"), t.Exclude),
	}
}

func (r *resolver) globs(p *field.Path, globs []v1alpha1.ToolGlob) []string {
	if len(globs) > maxToolGlobs {
		r.errs = append(r.errs, field.TooMany(p, len(globs), maxToolGlobs))
	}
	var out []string
	for i, g := range globs {
		gp := p.Index(i)
		switch n := utf8.RuneCountInString(string(g)); {
		case n == 0:
			r.errs = append(r.errs, field.Required(gp, "must not be empty"))
		case n > maxToolGlobLen:
			r.errs = append(r.errs, field.TooLongCharacters(gp, "", maxToolGlobLen))
		default:
			// path.Match reports a malformed pattern whatever the name.
			if _, err := path.Match(string(g), ""); err != nil {
				r.errs = append(r.errs, field.Invalid(gp, string(g),
					"must be a path.Match glob: *, ?, closed non-empty classes such as [a-z] or [^a-z], and \\ escaping the next character"))
			}
		}
		out = append(out, string(g))
	}
	return out
}
