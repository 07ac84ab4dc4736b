// Command image builds the operator's container image, and the test images of
// `make test-e2e`, as OCI tarballs without a Docker engine (`make image`).
//
// An image is a recipe (recipes.go): static Go binaries built from this
// module, files taken from Debian packages extracted by hack/debs.sh (tini,
// the CA bundle), and a distroless-like base layer (/etc/passwd and
// /etc/group with the nonroot user 65532, /tmp, /home/nonroot). The output
// is deterministic: the same sources give the same digest. The tarball is
// an OCI image layout that also carries Docker's manifest.json, as
// `docker save` writes it, so both `ctr images import` and `docker load`
// read it.
//
// The manager recipe is the image the Dockerfile describes (same
// entrypoint, user and files); a test keeps the two from drifting. See
// docs/design.md, "Install".
package main
