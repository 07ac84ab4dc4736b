package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// The users and groups of distroless's static image: root, nobody and
// nonroot (65532), whose home is /home/nonroot.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nobody:x:65534:\n" +
		"tty:x:5:\n" +
		"staff:x:50:\n" +
		"nonroot:x:65532:\n"
	nsswitch = "hosts: files dns\n"
	// caBundle is where Go's crypto/x509 and OpenSSL look on Debian.
	caBundle = "/etc/ssl/certs/ca-certificates.crt"
)

// baseEntries is the distroless-like base: users, the CA bundle made from
// Debian's ca-certificates package under debs, a world-writable /tmp and
// the nonroot user's home.
func baseEntries(debs string) ([]entry, error) {
	bundle, err := caCertificates(debPath(debs, "ca-certificates", "usr/share/ca-certificates"))
	if err != nil {
		return nil, err
	}
	return []entry{
		{path: "/etc/passwd", mode: 0o644, data: []byte(passwd)},
		{path: "/etc/group", mode: 0o644, data: []byte(group)},
		{path: "/etc/nsswitch.conf", mode: 0o644, data: []byte(nsswitch)},
		{path: caBundle, mode: 0o644, data: bundle},
		{path: "/tmp", mode: 0o1777, dir: true},
		{path: "/root", mode: 0o700, dir: true},
		{path: "/home/nonroot", mode: 0o700, uid: 65532, gid: 65532, dir: true},
	}, nil
}

// caCertificates concatenates every certificate the package ships, in path
// order, as update-ca-certificates does with the default configuration
// (every certificate enabled).
func caCertificates(dir string) ([]byte, error) {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Ext(p) == ".crt" {
			paths = append(paths, p)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the CA certificates (run hack/debs.sh ca-certificates): %w", err)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no CA certificates under %s", dir)
	}
	sort.Strings(paths)
	var out bytes.Buffer
	for _, p := range paths {
		pem, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		out.Write(pem)
		if !bytes.HasSuffix(pem, []byte("\n")) {
			out.WriteByte('\n')
		}
	}
	return out.Bytes(), nil
}
