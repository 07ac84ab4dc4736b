package api_test

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/mcpbridge/operator/internal/testenv"
)

// sampleEntries lists config/samples, except kustomization.yaml, as table
// entries. It runs while the spec tree is built.
func sampleEntries() []TableEntry {
	root, err := testenv.ModuleRoot()
	if err != nil {
		panic(err)
	}
	dir := filepath.Join(root, "config", "samples")
	files, err := os.ReadDir(dir)
	if err != nil {
		panic(err)
	}
	var entries []TableEntry
	for _, f := range files {
		if f.IsDir() || f.Name() == "kustomization.yaml" {
			continue
		}
		entries = append(entries, Entry(filepath.Join("config", "samples", f.Name()), filepath.Join(dir, f.Name())))
	}
	return entries
}

var _ = Describe("config/samples", func() {
	entries := sampleEntries()

	It("holds at least one sample", func() {
		Expect(entries).NotTo(BeEmpty())
	})

	DescribeTable("passes kubectl apply --dry-run=server",
		func(ctx SpecContext, path string) {
			ns := newNamespace(ctx)
			out := kubectl(ctx, "apply", "--dry-run=server", "-f", path, "-n", ns)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			Expect(lines).NotTo(BeEmpty())
			for _, l := range lines {
				Expect(l).To(HaveSuffix("(server dry run)"))
			}
			Expect(out).To(ContainSubstring("mcpserver.mcpbridge.dev/"))

			// A dry run stores nothing.
			Expect(kubectl(ctx, "get", "mcpservers", "-n", ns, "-o", "name")).To(BeEmpty())
		},
		entries,
	)

	It("is described by kubectl explain mcpserver.spec", func(ctx SpecContext) {
		// The apiserver publishes a new CRD's OpenAPI asynchronously.
		Eventually(func(g Gomega) string {
			stdout, _, err := testEnv.Kubectl(ctx, "explain", "mcpserver.spec")
			g.Expect(err).NotTo(HaveOccurred())
			return stdout
		}).WithContext(ctx).WithTimeout(time.Minute).Should(SatisfyAll(
			ContainSubstring("KIND:"),
			ContainSubstring("McpServer"),
			MatchRegexp(`(?m)^\s+transport\s+<string>.*-required-`),
			MatchRegexp(`(?m)^\s+serverName\s+<string>`),
			MatchRegexp(`(?m)^\s+stdio\s+<Object>`),
			MatchRegexp(`(?m)^\s+streamableHttp\s+<Object>`),
			MatchRegexp(`(?m)^\s+reconnect\s+<Object>`),
		))
	})
})
