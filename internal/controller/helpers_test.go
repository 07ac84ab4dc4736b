package controller_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/bridge"
	"github.com/mcpbridge/operator/internal/controller"
	toolregistry "github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/test/fixture"
)

const (
	eventuallyTimeout = 30 * time.Second
	poll              = 50 * time.Millisecond
)

// stdioServer is an McpServer running the fixture with args and short delays.
func stdioServer(ns, name string, args ...string) *v1alpha1.McpServer {
	return &v1alpha1.McpServer{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.McpServerSpec{
			Transport:           v1alpha1.TransportStdio,
			Stdio:               &v1alpha1.StdioTransport{Command: fixtureBin, Args: args},
			ConnectionTimeoutMs: ptr32(10000),
			Reconnect: &v1alpha1.ReconnectPolicy{
				InitialDelayMs: ptr32(50), MaxDelayMs: ptr32(400), MaxAttempts: ptr32(4),
			},
		},
	}
}

func ptr32(v int32) *int32 { return &v }

func get(ns, name string) *v1alpha1.McpServer {
	obj := &v1alpha1.McpServer{}
	Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj)).To(Succeed())
	return obj
}

// phaseOf polls a resource's phase.
func phaseOf(ns, name string) func() v1alpha1.Phase {
	return func() v1alpha1.Phase {
		obj := &v1alpha1.McpServer{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
			return ""
		}
		return obj.Status.Phase
	}
}

// readyAt waits until the resource is Ready in at least connection generation gen.
func readyAt(ns, name string, gen int64) *v1alpha1.McpServer {
	var obj *v1alpha1.McpServer
	Eventually(func(g Gomega) {
		obj = &v1alpha1.McpServer{}
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj)).To(Succeed())
		g.Expect(obj.Status.Phase).To(Equal(v1alpha1.PhaseReady))
		g.Expect(obj.Status.ConnectionGeneration).To(BeNumerically(">=", gen))
		g.Expect(obj.Status.ObservedGeneration).To(Equal(obj.Generation))
	}, eventuallyTimeout, poll).Should(Succeed())
	return obj
}

func toolNames(obj *v1alpha1.McpServer) []string {
	out := make([]string, len(obj.Status.Tools))
	for i, t := range obj.Status.Tools {
		out[i] = t.Name
	}
	return out
}

// kstatusOf computes the kstatus status of a resource as Flux and Argo do.
func kstatusOf(obj *v1alpha1.McpServer) status.Status {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	Expect(err).NotTo(HaveOccurred())
	res, err := status.Compute(&unstructured.Unstructured{Object: u})
	Expect(err).NotTo(HaveOccurred())
	return res.Status
}

// eventsFor lists the reasons and messages of events about a resource.
func eventsFor(ns, name string) []string {
	list := &corev1.EventList{}
	Expect(k8s.List(context.Background(), list, client.InNamespace(ns))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Name == name {
			out = append(out, e.Reason+": "+e.Message)
		}
	}
	return out
}

func hasEvent(ns, name, reason, contains string) func() bool {
	return func() bool {
		for _, e := range eventsFor(ns, name) {
			if strings.HasPrefix(e, reason+":") && strings.Contains(e, contains) {
				return true
			}
		}
		return false
	}
}

// lifetimes reads the fixture's events file; it must parse.
func lifetimes(path string) []fixture.Lifetime {
	evs, err := fixture.ReadEvents(path)
	Expect(err).NotTo(HaveOccurred())
	return fixture.Lifetimes(evs)
}

func describe(obj *v1alpha1.McpServer) string {
	return fmt.Sprintf("%s/%s phase=%s gen=%d", obj.Namespace, obj.Name, obj.Status.Phase, obj.Status.ConnectionGeneration)
}

func textOf(res *mcp.CallToolResult) string { return bridge.RenderText(res) }

// metricValue reads a gauge or counter for one McpServer from the
// controller-runtime registry that the manager serves on /metrics.
func metricValue(metric, ns, name string) (float64, bool) {
	families, err := ctrlmetrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() != metric {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] == ns && labels["name"] == name {
				if m.GetGauge() != nil {
					return m.GetGauge().GetValue(), true
				}
				return m.GetCounter().GetValue(), true
			}
		}
	}
	return 0, false
}

// watchMcpServers watches the McpServers of ns for the rest of the spec:
// every status the apiserver stores arrives as an event.
func watchMcpServers(ns string) watch.Interface {
	w, err := directClient().Watch(context.Background(), &v1alpha1.McpServerList{}, client.InNamespace(ns))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(w.Stop)
	return w
}

// untilPhase hands every event of w to seen until one carries phase.
func untilPhase(w watch.Interface, phase v1alpha1.Phase, seen func(watch.Event)) {
	Eventually(func() v1alpha1.Phase {
		select {
		case ev := <-w.ResultChan():
			seen(ev)
			if m, ok := ev.Object.(*v1alpha1.McpServer); ok {
				return m.Status.Phase
			}
		case <-time.After(50 * time.Millisecond):
		}
		return ""
	}, eventuallyTimeout, time.Millisecond).Should(Equal(phase))
}

// directClient reads and writes the apiserver without a cache.
func directClient() client.WithWatch {
	GinkgoHelper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	Expect(err).NotTo(HaveOccurred())
	return wc
}

// countingMcpServerGets is wc counting the McpServers it reads: a reader
// whose API reads a spec can count.
func countingMcpServerGets(wc client.WithWatch) (client.WithWatch, *atomic.Int32) {
	var gets atomic.Int32
	return interceptor.NewClient(wc, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*v1alpha1.McpServer); ok {
				gets.Add(1)
			}
			return c.Get(ctx, k, obj, opts...)
		},
	}), &gets
}

// rewritingGets is wc with every object it reads passed through rewrite:
// a reader that returns what the apiserver would not.
func rewritingGets(wc client.WithWatch, rewrite func(client.Object)) client.WithWatch {
	return interceptor.NewClient(wc, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			rewrite(obj)
			return nil
		},
	})
}

// standaloneReconciler reconciles outside the suite's manager: cached reads
// from cached, uncached ones from reader, with supervisors of its own that
// run until the spec ends.
func standaloneReconciler(cached client.WithWatch, reader client.Reader, sups controller.SupervisorsOptions) *controller.McpServerReconciler {
	sups.Registry = toolregistry.New()
	r := &controller.McpServerReconciler{
		Client: withoutFieldSelectors(cached), APIReader: reader, Recorder: events.NewFakeRecorder(16),
		Supervisors: controller.NewSupervisors(sups), Runtime: localEverywhere,
	}
	runSupervisors(r.Supervisors)
	return r
}

// httpFixtureServer is a Streamable HTTP McpServer of a fixture of its own.
func httpFixtureServer(ns, name string) *v1alpha1.McpServer {
	m := stdioServer(ns, name)
	m.Spec.Transport, m.Spec.Stdio = v1alpha1.TransportStreamableHTTP, nil
	m.Spec.StreamableHTTP = &v1alpha1.StreamableHTTPTransport{URL: serveFixture("tcp4", "127.0.0.1:0").URL + "/mcp"}
	return m
}

// replicaReconciler is the reconciler of replica "self" among replicas,
// run outside the suite's manager, which stops until the spec ends.
func replicaReconciler(replicas controller.Replicas) *controller.McpServerReconciler {
	GinkgoHelper()
	return replicaReconcilerWith(replicas, controller.SupervisorsOptions{})
}

// replicaReconcilerWith is replicaReconciler with supervisors of sups'
// options (their egress policy allows loopback).
func replicaReconcilerWith(replicas controller.Replicas, sups controller.SupervisorsOptions) *controller.McpServerReconciler {
	GinkgoHelper()
	stopManager()
	DeferCleanup(startManager)
	wc := directClient()
	sups.Egress = testEgress("127.0.0.0/8")
	r := standaloneReconciler(wc, wc, sups)
	r.Replica, r.Replicas = "self", replicas
	return r
}
