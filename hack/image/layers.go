package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// epoch is the timestamp of every file and of the image: a fixed time keeps
// the digest a function of the content alone.
var epoch = time.Unix(0, 0).UTC()

// entry is one file or directory of a layer.
type entry struct {
	path     string // absolute path in the image
	mode     int64  // permission bits
	uid, gid int
	dir      bool
	data     []byte
}

// layer builds a gzip-compressed OCI layer from entries, with their parent
// directories, in a fixed order and with fixed timestamps.
func layer(entries []entry) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range withParents(entries) {
		if err := tw.WriteHeader(header(e)); err != nil {
			return nil, fmt.Errorf("writing %s: %w", e.path, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("writing %s: %w", e.path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	// Compressed here, once, so that the digest depends on the content and
	// Go's compress/gzip only; LayerFromOpener keeps gzip input as it is.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(buf.Bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz.Bytes())), nil
	}, tarball.WithMediaType(types.OCILayer))
}

func header(e entry) *tar.Header {
	h := &tar.Header{
		Name:    strings.TrimPrefix(e.path, "/"),
		Mode:    e.mode,
		Uid:     e.uid,
		Gid:     e.gid,
		ModTime: epoch,
		Format:  tar.FormatPAX,
	}
	if e.dir {
		h.Typeflag = tar.TypeDir
		h.Name += "/"
	} else {
		h.Typeflag = tar.TypeReg
		h.Size = int64(len(e.data))
	}
	return h
}

// withParents sorts entries by path and adds the directories that lead to
// them (root-owned, 0755) where the entries do not name them.
func withParents(entries []entry) []entry {
	named := map[string]bool{}
	for _, e := range entries {
		named[e.path] = true
	}
	all := append([]entry(nil), entries...)
	for _, e := range entries {
		for dir := path.Dir(e.path); dir != "/"; dir = path.Dir(dir) {
			if !named[dir] {
				named[dir] = true
				all = append(all, entry{path: dir, mode: 0o755, dir: true})
			}
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].path < all[j].path })
	return all
}

// fileEntry reads a host file into an executable entry at imagePath.
func fileEntry(src, imagePath string) (entry, error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return entry{}, err
	}
	return entry{path: imagePath, mode: 0o755, data: data}, nil
}

// debPath is a file of a package that hack/debs.sh extracted under debs.
func debPath(debs, pkg, file string) string {
	return filepath.Join(debs, pkg, filepath.FromSlash(file))
}
