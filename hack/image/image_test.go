package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestManagerMatchesDockerfile keeps the manager recipe and the Dockerfile's
// final stage in step: same entrypoint, user and files.
func TestManagerMatchesDockerfile(t *testing.T) {
	stage := dockerfileStage(t, "../../Dockerfile", "manager")
	r := recipes["manager"]

	var entrypoint []string
	if err := json.Unmarshal([]byte(stage["ENTRYPOINT"][0]), &entrypoint); err != nil {
		t.Fatalf("ENTRYPOINT of the Dockerfile: %v", err)
	}
	if !reflect.DeepEqual(entrypoint, r.entrypoint) {
		t.Errorf("entrypoint: Dockerfile %q, recipe %q", entrypoint, r.entrypoint)
	}
	if got := stage["USER"]; len(got) != 1 || got[0] != r.user {
		t.Errorf("user: Dockerfile %q, recipe %q", got, r.user)
	}
	var copied []string
	for _, c := range stage["COPY"] {
		f := strings.Fields(c)
		copied = append(copied, f[len(f)-1])
	}
	var paths []string
	for _, b := range r.binaries {
		paths = append(paths, b.path)
	}
	for _, f := range r.files {
		paths = append(paths, f.path)
	}
	sort.Strings(copied)
	sort.Strings(paths)
	if !reflect.DeepEqual(copied, paths) {
		t.Errorf("files: Dockerfile copies %q, recipe has %q", copied, paths)
	}
	if !strings.Contains(stage["FROM"][0], "distroless/static") || !strings.Contains(stage["FROM"][0], ":nonroot") || !r.base {
		t.Errorf("the Dockerfile's stage is %q; the recipe must add the same distroless static nonroot base", stage["FROM"][0])
	}
}

// dockerfileStage returns the instructions of the stage named stage, by
// keyword.
func dockerfileStage(t *testing.T, path, stage string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cur map[string][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		kw, rest, _ := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		switch {
		case kw == "FROM" && strings.HasSuffix(rest, " AS "+stage):
			cur = map[string][]string{"FROM": {rest}}
		case kw == "FROM":
			if cur != nil {
				return cur
			}
		case cur != nil && kw != "" && !strings.HasPrefix(kw, "#"):
			cur[kw] = append(cur[kw], rest)
		}
	}
	if cur == nil {
		t.Fatalf("no stage %q in %s", stage, path)
	}
	return cur
}

// TestArchive builds an image from host files twice: the archives are
// byte-identical, Docker's manifest.json and the OCI index name the same
// image, and the config and base layer are what the recipe says.
func TestArchive(t *testing.T) {
	in := fakeInputs(t)
	r := recipe{
		title: "t", files: []hostFile{{src: "hello", path: "/hello"}},
		entrypoint: []string{"/hello"}, user: nonroot, base: true,
	}
	ref, err := name.NewTag("example.test/hello:v1")
	if err != nil {
		t.Fatal(err)
	}
	paths := []string{filepath.Join(t.TempDir(), "a.tar"), filepath.Join(t.TempDir(), "b.tar")}
	var built v1.Image
	for _, p := range paths {
		if built, err = build(r, in); err != nil {
			t.Fatal(err)
		}
		if err := writeArchive(p, ref, built); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := os.ReadFile(paths[0])
	b, _ := os.ReadFile(paths[1])
	if !bytes.Equal(a, b) {
		t.Fatal("two builds of the same recipe differ")
	}

	img, err := tarball.ImageFromPath(paths[0], &ref)
	if err != nil {
		t.Fatalf("reading manifest.json: %v", err)
	}
	checkIndex(t, a, ref, built)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != nonroot || !reflect.DeepEqual(cf.Config.Entrypoint, []string{"/hello"}) {
		t.Errorf("config user %q entrypoint %q", cf.Config.User, cf.Config.Entrypoint)
	}
	if cf.Config.Labels["org.opencontainers.image.licenses"] != "Apache-2.0" || cf.Config.Labels["org.opencontainers.image.title"] != "t" {
		t.Errorf("labels %v", cf.Config.Labels)
	}
	files := imageFiles(t, img)
	for path, want := range map[string]string{
		"etc/passwd":                        "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin",
		"etc/group":                         "nonroot:x:65532:",
		"etc/ssl/certs/ca-certificates.crt": "CERT A\nCERT B\n",
		"hello":                             "hello world",
	} {
		if !strings.Contains(files[path].data, want) {
			t.Errorf("%s holds %q, want it to contain %q", path, files[path].data, want)
		}
	}
	if h := files["tmp/"]; h.mode != 0o1777 {
		t.Errorf("/tmp mode %o, want 1777", h.mode)
	}
	if h := files["home/nonroot/"]; h.uid != 65532 || h.mode != 0o700 {
		t.Errorf("/home/nonroot uid %d mode %o", h.uid, h.mode)
	}
	if h := files["hello"]; h.mode != 0o755 {
		t.Errorf("/hello mode %o, want 755", h.mode)
	}
}

// fakeInputs is a debs directory with two certificates and a node
// directory with one file.
func fakeInputs(t *testing.T) inputs {
	dir := t.TempDir()
	certs := filepath.Join(dir, "debs", "ca-certificates", "usr", "share", "ca-certificates", "mozilla")
	node := filepath.Join(dir, "node")
	for p, data := range map[string]string{
		filepath.Join(certs, "b.crt"): "CERT B", filepath.Join(certs, "a.crt"): "CERT A\n",
		filepath.Join(node, "hello"): "hello world",
	} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return inputs{debs: filepath.Join(dir, "debs"), node: node, workDir: t.TempDir(),
		labels: labels(name.MustParseReference("example.test/hello:v1").(name.Tag), "")}
}

// checkIndex reads index.json from the archive: it names ref and points at
// the image's manifest.
func checkIndex(t *testing.T, archive []byte, ref name.Tag, img v1.Image) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("no index.json: %v", err)
		}
		if h.Name != "index.json" {
			continue
		}
		var idx v1.IndexManifest
		if err := json.NewDecoder(tr).Decode(&idx); err != nil {
			t.Fatal(err)
		}
		want, _ := img.Digest()
		m := idx.Manifests[0]
		if len(idx.Manifests) != 1 || m.Digest != want || m.Annotations["io.containerd.image.name"] != ref.String() {
			t.Errorf("index.json %+v, want one manifest %s named %s", idx, want, ref)
		}
		return
	}
}

type fileInfo struct {
	data string
	mode int64
	uid  int
}

// imageFiles reads every file of every layer of img.
func imageFiles(t *testing.T, img v1.Image) map[string]fileInfo {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]fileInfo{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(tr)
			files[h.Name] = fileInfo{data: string(data), mode: h.Mode, uid: h.Uid}
		}
		rc.Close()
	}
	return files
}
