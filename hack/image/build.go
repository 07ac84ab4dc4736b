package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// inputs are where a recipe's parts come from.
type inputs struct {
	moduleRoot string // the Go module whose packages are built
	debs       string // hack/debs.sh's output (bin/debs)
	node       string // hack/build-node.sh's output (bin/node)
	workDir    string // scratch space for compiled binaries
	labels     map[string]string
}

// build makes the image of recipe r: the base layer, then one layer of host
// files, then one layer of this module's binaries (the one that changes
// most often, last).
func build(r recipe, in inputs) (v1.Image, error) {
	var layers []v1.Layer
	add := func(entries []entry, err error) error {
		if err != nil || len(entries) == 0 {
			return err
		}
		l, err := layer(entries)
		if err == nil {
			layers = append(layers, l)
		}
		return err
	}
	if r.base {
		if err := add(baseEntries(in.debs)); err != nil {
			return nil, err
		}
	}
	if err := add(hostEntries(r.files, in)); err != nil {
		return nil, err
	}
	if err := add(binaryEntries(r.binaries, in)); err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layers...)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	return mutate.ConfigFile(img, configFile(r, in.labels, img))
}

// configFile is the image config: entrypoint, user, environment, labels.
func configFile(r recipe, labels map[string]string, img v1.Image) *v1.ConfigFile {
	cf, _ := img.ConfigFile() // an appended image's config is in memory
	cf = cf.DeepCopy()
	cf.Architecture = "amd64"
	cf.OS = "linux"
	cf.Created = v1.Time{Time: epoch}
	cf.Config = v1.Config{
		Entrypoint: r.entrypoint,
		User:       r.user,
		WorkingDir: "/",
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"SSL_CERT_FILE=" + caBundle,
		},
		Labels: map[string]string{
			"org.opencontainers.image.title":       r.title,
			"org.opencontainers.image.description": r.description,
		},
	}
	for k, v := range labels {
		cf.Config.Labels[k] = v
	}
	cf.History = nil
	return cf
}

// hostEntries reads the recipe's host files.
func hostEntries(files []hostFile, in inputs) ([]entry, error) {
	var entries []entry
	for _, f := range files {
		src := filepath.Join(in.node, f.src)
		if f.deb != "" {
			src = debPath(in.debs, f.deb, f.src)
		}
		e, err := fileEntry(src, f.path)
		if err != nil {
			return nil, fmt.Errorf("file %s of the image: %w", f.path, err)
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// binaryEntries compiles each binary static and reproducible (-trimpath,
// no VCS stamp, stripped) for linux/amd64.
func binaryEntries(binaries []binary, in inputs) ([]entry, error) {
	var entries []entry
	for _, b := range binaries {
		out := filepath.Join(in.workDir, strings.TrimPrefix(b.path, "/"))
		cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out, b.pkg)
		cmd.Dir = in.moduleRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("go build %s: %w", b.pkg, err)
		}
		e, err := fileEntry(out, b.path)
		if err != nil {
			return nil, err
		}
		entries = append(entries, e)
	}
	return entries, nil
}
