package main

// recipe describes one image: what goes in it and how it starts.
type recipe struct {
	// title and description become OCI labels.
	title, description string
	// binaries are Go packages of this module, built static into the image.
	binaries []binary
	// files are copied from the host (Debian packages under the debs
	// directory, or built node binaries), by image path.
	files []hostFile
	// entrypoint and user are the image config's.
	entrypoint []string
	user       string
	// base adds the distroless-like base layer (users, CA bundle, /tmp).
	base bool
}

// binary is a Go main package and the path it takes in the image.
type binary struct {
	pkg, path string
}

// hostFile is a file of a Debian package extracted by hack/debs.sh
// (deb set) or of bin/node (deb empty), and the path it takes in the image.
type hostFile struct {
	deb, src, path string
}

// nonroot is distroless's nonroot user and group.
const nonroot = "65532:65532"

// recipes are the images this program builds, by name.
var recipes = map[string]recipe{
	// The Dockerfile's final stage; keep both in step (TestManagerMatchesDockerfile).
	"manager": {
		title:       "mcp-bridge operator",
		description: "Manages MCP servers as McpServer resources and serves their tools through an authenticated gateway.",
		binaries: []binary{
			{pkg: "./cmd/manager", path: "/manager"},
			// Copied into every Pod-runtime server by `/shim install DEST`.
			{pkg: "./cmd/shim", path: "/shim"},
		},
		files: []hostFile{
			// A minimal init as PID 1 that reaps orphans; see the Dockerfile.
			{deb: "tini", src: "usr/bin/tini-static", path: "/tini"},
		},
		entrypoint: []string{"/tini", "--", "/manager"},
		user:       nonroot,
		base:       true,
	},
	// The in-repo MCP server as a Streamable HTTP server Pod for the e2e suite.
	"mcp-fixture": {
		title:       "mcp-bridge test fixture",
		description: "The in-repo MCP fixture server (test/fixture), for the e2e suite.",
		binaries: []binary{
			{pkg: "./test/fixture/cmd/mcp-fixture", path: "/mcp-fixture"},
		},
		entrypoint: []string{"/mcp-fixture"},
		user:       nonroot,
		base:       true,
	},
	// The Pod sandbox image, under the tag containerd pins (bin/node/pause.version).
	"pause": {
		title:       "pause",
		description: "kubernetes' build/pause/linux/pause.c, built static by hack/build-node.sh.",
		files:       []hostFile{{src: "pause", path: "/pause"}},
		entrypoint:  []string{"/pause"},
		user:        "65535:65535",
	},
}
