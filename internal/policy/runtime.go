package policy

import (
	"cmp"
	"path"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

// The default images of the Pod runtime (flags --node-image and
// --python-image). See docs/design.md, "Choosing a runtime".
const (
	DefaultNodeImage   = "node:22-bookworm-slim"
	DefaultPythonImage = "ghcr.io/astral-sh/uv:python3.13-bookworm-slim"
)

// AllNamespaces in RuntimeConfig.LocalNamespaces allows the Local runtime in
// every namespace.
const AllNamespaces = "*"

// RuntimeConfig is the administrator's side of the resolve step: the
// runtime choice (the manager's flags --local-stdio-namespaces, --node-image
// and --python-image) and the floors and ceilings on a spec's timings. The
// zero value is the secure default for the runtime (no namespace runs Local,
// and the default images) and sets no floor or ceiling.
type RuntimeConfig struct {
	// LocalNamespaces may run stdio servers without an image as children of
	// the manager; AllNamespaces ("*") allows every namespace.
	LocalNamespaces []string
	// NodeImage runs npx and node; empty means DefaultNodeImage.
	NodeImage string
	// PythonImage runs uvx, uv, python and python3; empty means
	// DefaultPythonImage.
	PythonImage string
	// Limits bound the spec's timings (--min-reconnect-delay and
	// friends); the zero value bounds nothing.
	Limits Limits
}

// AllowsLocal reports whether stdio servers in namespace may run as children
// of the manager.
func (c RuntimeConfig) AllowsLocal(namespace string) bool {
	return slices.Contains(c.LocalNamespaces, AllNamespaces) || slices.Contains(c.LocalNamespaces, namespace)
}

// defaultImage is the image for a command by its base name ("/usr/bin/python3"
// counts as python3), or "" when none is known.
func (c RuntimeConfig) defaultImage(command string) string {
	switch path.Base(command) {
	case "npx", "node":
		return cmp.Or(c.NodeImage, DefaultNodeImage)
	case "uvx", "uv", "python", "python3":
		return cmp.Or(c.PythonImage, DefaultPythonImage)
	}
	return ""
}

// defaultImageCommands are the base names defaultImage knows, for messages.
var defaultImageCommands = []string{"npx", "node", "uvx", "uv", "python", "python3"}

// Selection is where one stdio server runs.
type Selection struct {
	Runtime v1alpha1.Runtime
	// Image is the Pod's image (the spec's, or the default for the
	// command); empty for Local.
	Image string
}

// SelectRuntime chooses the runtime of a stdio server in namespace whose spec
// sets image (maybe empty) and command: an image means Pod; no image means
// Local where cfg allows it, otherwise Pod with the default image for the
// command's base name. A command without a default image on a namespace
// without Local is an invalid spec: the returned error names
// spec.stdio.image. See docs/design.md, "Choosing a runtime".
func SelectRuntime(cfg RuntimeConfig, namespace, image, command string) (Selection, *field.Error) {
	switch {
	case image != "":
		return Selection{Runtime: v1alpha1.RuntimePod, Image: image}, nil
	case cfg.AllowsLocal(namespace):
		return Selection{Runtime: v1alpha1.RuntimeLocal}, nil
	}
	if img := cfg.defaultImage(command); img != "" {
		return Selection{Runtime: v1alpha1.RuntimePod, Image: img}, nil
	}
	return Selection{}, field.Required(field.NewPath("spec", "stdio", "image"),
		"required on this cluster: stdio servers in namespace "+strconv.Quote(namespace)+
			" run in their own Pods, and no default image is known for the command "+strconv.Quote(path.Base(command))+
			" (there are defaults for "+strings.Join(defaultImageCommands, ", ")+")")
}
