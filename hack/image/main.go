package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	image := fs.String("image", "manager", "recipe to build: "+strings.Join(recipeNames(), ", "))
	tag := fs.String("tag", "", "image name and tag, e.g. ghcr.io/mcpbridge/operator:dev (required)")
	out := fs.String("o", "", "output tarball (required)")
	debs := fs.String("debs", "bin/debs", "Debian packages extracted by hack/debs.sh")
	node := fs.String("node", "bin/node", "node binaries built by hack/build-node.sh")
	revision := fs.String("revision", "", "source revision for the org.opencontainers.image.revision label")
	if err := fs.Parse(args); err != nil {
		return err
	}
	r, ok := recipes[*image]
	if !ok {
		return fmt.Errorf("unknown image %q; known: %s", *image, strings.Join(recipeNames(), ", "))
	}
	if *tag == "" || *out == "" {
		return fmt.Errorf("-tag and -o are required")
	}
	ref, err := name.NewTag(*tag, name.WeakValidation)
	if err != nil {
		return fmt.Errorf("-tag: %w", err)
	}
	work, err := os.MkdirTemp("", "mcpbridge-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	img, err := build(r, inputs{
		moduleRoot: root, debs: abs(*debs), node: abs(*node), workDir: work,
		labels: labels(ref, *revision),
	})
	if err != nil {
		return err
	}
	if err := writeArchive(*out, ref, img); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s -> %s\n", ref, digest, *out)
	return nil
}

// labels are the OCI labels every image carries besides title and description.
func labels(ref name.Tag, revision string) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.source":   "https://github.com/mcpbridge/operator",
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.version":  ref.TagStr(),
	}
	if revision != "" {
		l["org.opencontainers.image.revision"] = revision
	}
	return l
}

func recipeNames() []string {
	var names []string
	for n := range recipes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func abs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}
