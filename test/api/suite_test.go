// Package api_test checks the McpServer API as the apiserver enforces it: the
// CRD's OpenAPI schema, defaults and CEL rules, the samples, the printer
// columns and the status subresource, against a real kube-apiserver and etcd.
package api_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	"github.com/mcpbridge/operator/internal/testenv"
)

var (
	testEnv   *testenv.Env
	k8sClient client.Client
)

func TestAPI(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "McpServer API Suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))

	var err error
	testEnv, err = testenv.Start()
	Expect(err).NotTo(HaveOccurred(), "starting the control plane")
	k8sClient = testEnv.Client
})

var _ = AfterSuite(func() {
	Expect(testEnv.Stop()).To(Succeed())
})

// newNamespace creates a namespace for the current spec and deletes it when
// the spec ends. envtest runs no namespace controller, so a deleted namespace
// stays Terminating; every spec gets a unique one.
func newNamespace(ctx context.Context) string {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "api-test-"}}
	Expect(k8sClient.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, ns))).To(Succeed())
	})
	return ns.Name
}

// kubectl runs bin/k8s/kubectl against the suite's control plane and fails
// the spec when it exits non-zero.
func kubectl(ctx context.Context, args ...string) string {
	GinkgoHelper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	stdout, _, err := testEnv.Kubectl(ctx, args...)
	Expect(err).NotTo(HaveOccurred())
	return stdout
}

// fromYAML parses one full manifest into an unstructured object; numbers
// become int64, as they do for kubectl. It runs while the spec tree is built,
// so a malformed manifest (a bug in the test) panics.
func fromYAML(manifest string) *unstructured.Unstructured {
	js, err := yaml.YAMLToJSON([]byte(manifest))
	if err != nil {
		panic(fmt.Sprintf("malformed test manifest: %v\n%s", err, manifest))
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(js); err != nil {
		panic(fmt.Sprintf("malformed test manifest: %v\n%s", err, manifest))
	}
	return u
}

// expectInvalid asserts that err is the apiserver refusing an object as
// Invalid (HTTP 422) with a message that names fieldPath, and that fieldPath
// is where the apiserver put it: the field of one of the causes (or a field
// below it), or, for a rule on the whole object (which has no field), that
// rule's message.
func expectInvalid(err error, fieldPath string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred(), "the apiserver accepted the object; want it refused at %s", fieldPath)
	Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want an Invalid (422) error, got %T: %v", err, err)
	Expect(err.Error()).To(ContainSubstring(fieldPath))

	var status apierrors.APIStatus
	Expect(errors.As(err, &status)).To(BeTrue())
	Expect(status.Status().Details).NotTo(BeNil())
	Expect(status.Status().Details.Causes).To(ContainElement(SatisfyAny(
		HaveField("Field", HavePrefix(fieldPath)),
		SatisfyAll(
			HaveField("Field", BeElementOf("", "<nil>")),
			HaveField("Message", ContainSubstring(fieldPath)),
		),
	)), "no cause of the error names %s", fieldPath)
}
