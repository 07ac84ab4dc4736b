package api_test

import (
	"errors"
	"fmt"
	"math/rand"
	"path"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/policy"
)

// spec.tools: the publish filter's patterns, checked by the CRD (list
// sizes, lengths, and the glob syntax by a CEL regular expression) and
// again by the resolve step (path.Match).

func toolFilter(include, exclude []v1alpha1.ToolGlob) mutation {
	return func(s *v1alpha1.McpServer) {
		s.Spec.Tools = &v1alpha1.ToolFilter{Include: include, Exclude: exclude}
	}
}

func globs(g ...v1alpha1.ToolGlob) []v1alpha1.ToolGlob { return g }

var _ = Describe("Invalid McpServer manifests: spec.tools", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
	})

	DescribeTable("are refused by the apiserver with the field named",
		func(ctx SpecContext, obj client.Object, fieldPath string) {
			expectRefused(ctx, ns, obj, fieldPath)
		},
		Entry("include with an unclosed class", stdioServer(toolFilter(globs("get_*", "[abc"), nil)), "spec.tools.include[1]"),
		Entry("include with an empty class", httpServer(toolFilter(globs("[]"), nil)), "spec.tools.include[0]"),
		Entry("include with a range missing its end", stdioServer(toolFilter(globs("[a-]"), nil)), "spec.tools.include[0]"),
		Entry("exclude ending in a backslash", stdioServer(toolFilter(nil, globs("delete_*", `rm\`))), "spec.tools.exclude[1]"),
		Entry("exclude with a negated empty class", stdioServer(toolFilter(nil, globs("[^]"))), "spec.tools.exclude[0]"),
		Entry("include with an empty pattern", stdioServer(toolFilter(globs(""), nil)), "spec.tools.include[0]"),
		Entry("include with a pattern of 257 characters",
			stdioServer(toolFilter(globs(v1alpha1.ToolGlob(strings.Repeat("a", 257))), nil)), "spec.tools.include[0]"),
		Entry("exclude with 65 patterns",
			stdioServer(toolFilter(nil, make([]v1alpha1.ToolGlob, 65))), "spec.tools.exclude"),
		Entry("include that is not a list", manifest(`{transport: stdio, stdio: {command: npx}, tools: {include: "get_*"}}`),
			"spec.tools.include"),
	)
})

var _ = Describe("Valid McpServer manifests: spec.tools", func() {
	It("keep include and exclude as written", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		f := &v1alpha1.ToolFilter{
			Include: globs("get_*", "create_issue", "[a-c]?_x", `star\*`, "[^_]*", "ns/*"),
			Exclude: globs("delete_*", "*_admin"),
		}
		got := createAndGet(ctx, ns, stdioServer(func(s *v1alpha1.McpServer) { s.Spec.Tools = f }))
		Expect(got.Spec.Tools).To(Equal(f))
	})

	// The CEL rule is a regular expression written to accept exactly the
	// patterns path.Match accepts; random patterns over the characters that
	// matter show both layers agree on every one.
	It("accept exactly the patterns the resolve step accepts", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		alphabet := []rune(`ab*?[]^-\/é`)
		rng := rand.New(rand.NewSource(11))
		var valid, invalid int
		for round := range 12 {
			var patterns []v1alpha1.ToolGlob
			for len(patterns) < 64 {
				b := make([]rune, 1+rng.Intn(8))
				for i := range b {
					b[i] = alphabet[rng.Intn(len(alphabet))]
				}
				patterns = append(patterns, v1alpha1.ToolGlob(b))
			}
			obj := stdioServer(named(fmt.Sprintf("globs-%d", round)), toolFilter(patterns, nil))
			obj.Namespace = ns

			refusedByAPI := map[string]bool{}
			err := k8sClient.Create(ctx, obj, client.DryRunAll)
			if err != nil {
				Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
				var status apierrors.APIStatus
				Expect(errors.As(err, &status)).To(BeTrue())
				for _, c := range status.Status().Details.Causes {
					refusedByAPI[c.Field] = true
				}
			}
			refusedByGo := map[string]bool{}
			_, rerr := policy.Resolve(ns, obj.Name, &obj.Spec, nil,
				policy.RuntimeConfig{LocalNamespaces: []string{policy.AllNamespaces}})
			var ise *policy.InvalidSpecError
			if errors.As(rerr, &ise) {
				for _, e := range ise.Errs {
					Expect(e.Type).To(Equal(field.ErrorTypeInvalid))
					refusedByGo[e.Field] = true
				}
			} else {
				Expect(rerr).NotTo(HaveOccurred())
			}
			for i, p := range patterns {
				f := fmt.Sprintf("spec.tools.include[%d]", i)
				_, merr := path.Match(string(p), "")
				Expect(refusedByAPI[f]).To(Equal(merr != nil), "pattern %q: refused by the apiserver %v, path.Match error %v", p, refusedByAPI[f], merr)
				Expect(refusedByGo[f]).To(Equal(merr != nil), "pattern %q: refused by the resolve step %v", p, refusedByGo[f])
				if merr == nil {
					valid++
				} else {
					invalid++
				}
			}
		}
		Expect(valid).To(BeNumerically(">", 100))
		Expect(invalid).To(BeNumerically(">", 100))
	})
})
