package main

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// writeArchive writes img as an OCI image layout in a tar file at path,
// named ref, with Docker's manifest.json beside index.json as `docker save`
// writes it. The file appears whole or not at all.
func writeArchive(path string, ref name.Tag, img v1.Image) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".image-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := writeLayout(tmp, ref, img); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func writeLayout(w io.Writer, ref name.Tag, img v1.Image) error {
	tw := tar.NewWriter(w)
	files, err := layoutFiles(ref, img)
	if err != nil {
		return err
	}
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: epoch, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

type archiveFile struct {
	name string
	data []byte
}

// layoutFiles lists the archive: the blobs (layers, config, manifest), then
// oci-layout, index.json and manifest.json.
func layoutFiles(ref name.Tag, img v1.Image) ([]archiveFile, error) {
	var files []archiveFile
	var layerPaths []string
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return nil, err
		}
		data, err := readAll(l.Compressed())
		if err != nil {
			return nil, err
		}
		files = append(files, archiveFile{blobPath(d), data})
		layerPaths = append(layerPaths, blobPath(d))
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return nil, err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return nil, err
	}
	manifest, err := img.RawManifest()
	if err != nil {
		return nil, err
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	files = append(files, archiveFile{blobPath(cfgName), cfg}, archiveFile{blobPath(digest), manifest})
	index, err := indexJSON(ref, digest, int64(len(manifest)))
	if err != nil {
		return nil, err
	}
	docker, err := json.Marshal([]map[string]any{{
		"Config": blobPath(cfgName), "RepoTags": []string{ref.String()}, "Layers": layerPaths,
	}})
	if err != nil {
		return nil, err
	}
	return append(files,
		archiveFile{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		archiveFile{"index.json", index},
		archiveFile{"manifest.json", docker},
	), nil
}

// indexJSON names the one manifest: containerd reads io.containerd.image.name,
// the OCI specification's annotation holds the tag.
func indexJSON(ref name.Tag, digest v1.Hash, size int64) ([]byte, error) {
	return json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: types.OCIManifestSchema1,
			Digest:    digest,
			Size:      size,
			Annotations: map[string]string{
				"io.containerd.image.name":          ref.String(),
				"org.opencontainers.image.ref.name": ref.TagStr(),
			},
		}},
	})
}

func blobPath(h v1.Hash) string {
	return fmt.Sprintf("blobs/%s/%s", h.Algorithm, h.Hex)
}

func readAll(rc io.ReadCloser, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}
