package controller_test

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

// The attempt budget is maxAttempts consecutive failed attempts per outage,
// the first connection at startup included: status, events and the Ready
// message say the same, and failedAttempts never exceeds maxAttempts.
var _ = Describe("The attempt budget", func() {

	// budgetServer runs the fixture through a shell: the first start with
	// first (empty: dead), every later start dead (an unknown flag).
	budgetServer := func(ns, name, first string) *v1alpha1.McpServer {
		counter := filepath.Join(GinkgoT().TempDir(), "count")
		script := `n=$(cat "` + counter + `" 2>/dev/null || echo 0); echo $((n+1)) > "` + counter + `"
if [ "$n" -eq 0 ] && [ -n "$1" ]; then exec "$0" "$1"; fi
exec "$0" --no-such-flag`
		obj := stdioServer(ns, name)
		obj.Spec.Stdio.Command = "/bin/sh"
		obj.Spec.Stdio.Args = []string{"-c", script, fixtureBin, first}
		obj.Spec.Reconnect.InitialDelayMs = ptr32(20)
		obj.Spec.Reconnect.MaxDelayMs = ptr32(300) // the stability window
		obj.Spec.Reconnect.MaxAttempts = ptr32(2)
		return obj
	}

	DescribeTable("ends at failedAttempts = maxAttempts with one message",
		func(ctx SpecContext, first string, wantGeneration int, wantAttempts []string) {
			ns := newNamespace()
			w := watchMcpServers(ns)
			Expect(k8s.Create(ctx, budgetServer(ns, "dead", first))).To(Succeed())
			maxSeen := int32(0)
			untilPhase(w, v1alpha1.PhaseFailed, func(ev watch.Event) {
				if m, ok := ev.Object.(*v1alpha1.McpServer); ok {
					maxSeen = max(maxSeen, m.Status.FailedAttempts)
				}
			})
			Expect(maxSeen).To(BeNumerically("<=", 2), "failedAttempts exceeded maxAttempts in some status write")

			failed := get(ns, "dead")
			want := "Gave up after 2 consecutive failed attempts (reconnect.maxAttempts is 2); tools unregistered"
			Expect(failed.Status.FailedAttempts).To(BeEquivalentTo(2))
			Expect(failed.Status.ConnectionGeneration).To(BeEquivalentTo(wantGeneration))
			ready := meta(failed, v1alpha1.ConditionReady)
			Expect(ready.Reason).To(Equal(v1alpha1.ReasonReconnectExhausted))
			Expect(ready.Message).To(Equal(want))
			Eventually(hasEvent(ns, "dead", v1alpha1.ReasonReconnectExhausted, want), eventuallyTimeout, poll).Should(BeTrue())

			// One Reconnecting event per attempt. Two of them recorded in
			// one reconcile are one Event series for the apiserver (the
			// same object version, reason and action), whose note is the
			// first to reach the recorder's sink: count occurrences, and
			// read the attempts the notes name.
			Eventually(func(g Gomega) {
				attempts, occurrences := reconnectingEvents(g, ns, "dead")
				g.Expect(occurrences).To(Equal(len(wantAttempts)), "Reconnecting events: %v", attempts)
				g.Expect(wantAttempts).To(ContainElements(attempts), "Reconnecting events")
			}, eventuallyTimeout, poll).Should(Succeed())

			out, _, err := env.Kubectl(ctx, "get", "mcpservers", "-n", ns)
			Expect(err).NotTo(HaveOccurred())
			Expect(out).To(MatchRegexp(fmt.Sprintf(`dead\s+dead\s+stdio\s+Failed\s+0\s+2\s+%d\s`, wantGeneration)))
		},
		Entry("for an outage that starts at startup", "", 2, []string{"2/2"}),
		Entry("for an outage that starts with the loss of a stable connection", "--exit-after=1500ms", 3, []string{"1/2", "2/2"}),
	)
})

// reconnectingEvents are the attempts ("1/2") that name's Reconnecting
// events say, and how many times such an event occurred (a series counts
// each of its occurrences).
func reconnectingEvents(g Gomega, ns, name string) (attempts []string, occurrences int) {
	list := &corev1.EventList{}
	g.Expect(k8s.List(context.Background(), list, client.InNamespace(ns))).To(Succeed())
	re := regexp.MustCompile(`\(attempt (\d+/\d+)\)`)
	for _, e := range list.Items {
		if e.InvolvedObject.Name != name || e.Reason != v1alpha1.ReasonReconnecting {
			continue
		}
		if m := re.FindStringSubmatch(e.Message); m != nil {
			attempts = append(attempts, m[1])
		}
		n := max(1, int(e.Count))
		if e.Series != nil {
			n = max(n, int(e.Series.Count))
		}
		occurrences += n
	}
	return attempts, occurrences
}
