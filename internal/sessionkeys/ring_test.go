package sessionkeys

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mcpbridge/operator/internal/gateway"
	"github.com/mcpbridge/operator/internal/testenv"
)

var _ gateway.SessionKeys = (*Ring)(nil)

// env is a real apiserver: a create that loses to another replica's, an
// update that loses (Conflict) and a deleted Secret are its answers.
var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(runWithControlPlane(m)) }

func runWithControlPlane(m *testing.M) int {
	var err error
	if env, err = testenv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "starting the control plane:", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}()
	return m.Run()
}

// clock is the rings' time, which the tests move.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

const (
	testRotate  = time.Hour
	testHonour  = 3 * time.Hour
	testRefresh = time.Minute
)

// secretIn names the ring's Secret in a namespace of the test's own.
func secretIn(t *testing.T) client.ObjectKey {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "sessionkeys-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return client.ObjectKey{Namespace: ns.Name, Name: DefaultSecretName}
}

func newRing(c client.Client, key client.ObjectKey, clk *clock) *Ring {
	r := New(c, key.Namespace, key.Name, testRotate, testHonour)
	r.Refresh = testRefresh
	r.now = clk.Now
	return r
}

func mustSync(t *testing.T, rings ...*Ring) {
	t.Helper()
	for _, r := range rings {
		if err := r.sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// secretKeys are the ids of the keys the Secret holds.
func secretKeys(t *testing.T, key client.ObjectKey) []uint32 {
	t.Helper()
	var s corev1.Secret
	if err := env.Client.Get(context.Background(), key, &s); err != nil {
		t.Fatal(err)
	}
	ring, err := decode(s.Data)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint32
	for _, k := range ring {
		ids = append(ids, k.ID)
	}
	return ids
}

// sameKey: what a seals with its key id, b opens.
func sameKey(t *testing.T, a, b *Ring, id uint32) {
	t.Helper()
	ka, ok := a.Key(id)
	if !ok {
		t.Fatalf("key %d not honoured by the first ring", id)
	}
	kb, ok := b.Key(id)
	if !ok {
		t.Fatalf("key %d not honoured by the second ring", id)
	}
	nonce := make([]byte, ka.NonceSize())
	if _, err := kb.Open(nil, nonce, ka.Seal(nil, nonce, []byte("state"), nil), nil); err != nil {
		t.Fatalf("key %d differs between the rings", id)
	}
}

// Two replicas that start at once keep one ring: the one whose create
// loses (AlreadyExists, from the apiserver) reads the winner's.
func TestRacingLoadersShareOneRing(t *testing.T) {
	key := secretIn(t)
	clk := &clock{now: time.Now()}
	winner := newRing(env.Client, key, clk)
	if winner.Check(nil) == nil {
		t.Fatal("ready before its first load")
	}
	mustSync(t, winner)
	base, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	gets := 0
	loser := interceptor.NewClient(base, interceptor.Funcs{
		// Its first read came before the winner's create.
		Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if gets++; gets == 1 {
				return apierrors.NewNotFound(corev1.Resource("secrets"), k.Name)
			}
			return c.Get(ctx, k, obj, opts...)
		},
	})
	other := newRing(loser, key, clk)
	mustSync(t, other)
	if gets != 2 {
		t.Fatalf("the losing ring read %d times, want 2 (before its create and after)", gets)
	}
	if err := other.Check(nil); err != nil {
		t.Fatal(err)
	}
	wid, _, _ := winner.Current()
	oid, _, _ := other.Current()
	if wid != oid {
		t.Fatalf("current keys %d and %d: two rings", wid, oid)
	}
	sameKey(t, winner, other, wid)
	if ids := secretKeys(t, key); len(ids) != 1 {
		t.Fatalf("the Secret holds %d keys, want 1", len(ids))
	}
	var s corev1.Secret
	if err := env.Client.Get(context.Background(), key, &s); err != nil {
		t.Fatal(err)
	}
	if s.Type != corev1.SecretTypeOpaque || s.Labels["app.kubernetes.io/component"] != "session-keys" {
		t.Fatalf("Secret type %q labels %v", s.Type, s.Labels)
	}
}

// Truly at once: whichever wins, both hold the same one key.
func TestConcurrentLoadersShareOneRing(t *testing.T) {
	key := secretIn(t)
	clk := &clock{now: time.Now()}
	rings := []*Ring{newRing(env.Client, key, clk), newRing(env.Client, key, clk)}
	var wg sync.WaitGroup
	errs := make([]error, len(rings))
	for i, r := range rings {
		wg.Go(func() { errs[i] = r.sync(context.Background()) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	a, _, _ := rings[0].Current()
	b, _, _ := rings[1].Current()
	if a != b {
		t.Fatalf("current keys %d and %d", a, b)
	}
	sameKey(t, rings[0], rings[1], a)
}

// A rotation adds a key that every replica holds before it is current;
// the old key is honoured HonourFor after that, then retired.
func TestRotationHonoursTheOldKeyThenRetiresIt(t *testing.T) {
	key := secretIn(t)
	t0 := time.Now().Truncate(time.Second)
	clk := &clock{now: t0}
	a, b := newRing(env.Client, key, clk), newRing(env.Client, key, clk)
	mustSync(t, a)
	first, _, _ := a.Current()

	// Due: the new key is written now, current after the activation.
	clk.set(t0.Add(testRotate - a.activation()))
	mustSync(t, a, b)
	ids := secretKeys(t, key)
	if len(ids) != 2 || ids[0] != first {
		t.Fatalf("after the rotation the Secret holds %v, want %d and a new key", ids, first)
	}
	second := ids[1]
	for _, r := range []*Ring{a, b} {
		if cur, _, _ := r.Current(); cur != first {
			t.Fatalf("the new key is current before its activation (%d)", cur)
		}
	}
	sameKey(t, a, b, second) // b holds it before it is used

	clk.set(t0.Add(testRotate))
	for _, r := range []*Ring{a, b} {
		if cur, _, _ := r.Current(); cur != second {
			t.Fatalf("current key %d after the activation, want %d", cur, second)
		}
	}
	sameKey(t, a, b, first) // still honoured

	clk.set(t0.Add(testRotate + testHonour - time.Second))
	sameKey(t, a, b, first)
	clk.set(t0.Add(testRotate + testHonour + time.Second))
	if _, ok := b.Key(first); ok {
		t.Fatal("the old key is honoured past HonourFor")
	}
	mustSync(t, a)
	for _, id := range secretKeys(t, key) {
		if id == first {
			t.Fatal("the retired key is still in the Secret")
		}
	}
}

// A deleted Secret is made again with a new key: what was sealed with the
// old one opens nothing any more.
func TestADeletedSecretIsRecreated(t *testing.T) {
	key := secretIn(t)
	clk := &clock{now: time.Now()}
	r := newRing(env.Client, key, clk)
	mustSync(t, r)
	old, _, _ := r.Current()
	if err := env.Client.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
		Namespace: key.Namespace, Name: key.Name}}); err != nil {
		t.Fatal(err)
	}
	mustSync(t, r)
	ids := secretKeys(t, key)
	if len(ids) != 1 || ids[0] == old {
		t.Fatalf("the recreated Secret holds %v (the old key was %d)", ids, old)
	}
	if cur, _, _ := r.Current(); cur != ids[0] {
		t.Fatalf("current key %d, want the new %d", cur, ids[0])
	}
	if _, ok := r.Key(old); ok {
		t.Fatal("the deleted key is still honoured")
	}
}

// A damaged Secret is reported and left as it is; the ring keeps what it
// held.
func TestADamagedSecretIsLeftAlone(t *testing.T) {
	key := secretIn(t)
	clk := &clock{now: time.Now()}
	r := newRing(env.Client, key, clk)
	mustSync(t, r)
	held, _, _ := r.Current()
	var s corev1.Secret
	if err := env.Client.Get(context.Background(), key, &s); err != nil {
		t.Fatal(err)
	}
	s.Data = map[string][]byte{dataKey: []byte("junk")}
	if err := env.Client.Update(context.Background(), &s); err != nil {
		t.Fatal(err)
	}
	if err := r.sync(context.Background()); err == nil {
		t.Fatal("a damaged Secret was accepted")
	}
	if err := env.Client.Get(context.Background(), key, &s); err != nil || string(s.Data[dataKey]) != "junk" {
		t.Fatalf("the Secret was changed: %v", err)
	}
	if cur, _, ok := r.Current(); !ok || cur != held {
		t.Fatal("the ring dropped the keys it held")
	}
}

// A replica that may not write the Secret (a refused rotation) still seals
// and opens with the keys it read.
func TestARefusedWriteKeepsTheKeysRead(t *testing.T) {
	key := secretIn(t)
	t0 := time.Now()
	clk := &clock{now: t0}
	mustSync(t, newRing(env.Client, key, clk))
	base, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	readOnly := interceptor.NewClient(base, interceptor.Funcs{
		Update: func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error {
			return apierrors.NewForbidden(corev1.Resource("secrets"), key.Name, fmt.Errorf("not this replica"))
		},
	})
	r := newRing(readOnly, key, clk)
	clk.set(t0.Add(testRotate)) // a rotation is due
	if err := r.sync(context.Background()); err == nil {
		t.Fatal("the refused write was not reported")
	}
	if err := r.Check(nil); err != nil {
		t.Fatalf("not ready with the keys it read: %v", err)
	}
	ids := secretKeys(t, key)
	if cur, _, _ := r.Current(); len(ids) != 1 || cur != ids[0] {
		t.Fatalf("current key %d, the Secret holds %v", cur, ids)
	}
}

// As a manager's Runnable: ready once loaded, and a deleted Secret is back
// at the next read.
func TestStartKeepsTheRing(t *testing.T) {
	key := secretIn(t)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	r := New(mgr.GetClient(), key.Namespace, key.Name, 0, 0).WithReader(mgr.GetAPIReader())
	r.Refresh = 100 * time.Millisecond // re-read often: the test waits for a read, not for a time
	if err := mgr.Add(r); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	waitFor(t, "the ring is loaded", func() bool { return r.Check(nil) == nil })
	first, _, _ := r.Current()
	if err := env.Client.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
		Namespace: key.Namespace, Name: key.Name}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Secret is made again", func() bool {
		var s corev1.Secret
		return env.Client.Get(context.Background(), key, &s) == nil && s.UID != "" && func() bool {
			cur, _, _ := r.Current()
			return cur != first
		}()
	})
}

// waitFor polls cond until it holds, for at most a generous limit (a
// loaded machine must not fail the test).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
