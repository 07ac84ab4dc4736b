package kubeauth

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/util/cache"
)

// keyedLimits is a rate limiter per key: per source address for the
// TokenReviews of new tokens, so that one address flooding new tokens
// spends its own budget and not the global one every agent shares; per
// identity for SubjectAccessReviews. Limiters of keys not seen for
// limiterIdle are forgotten; the LRU bounds how many are kept.
type keyedLimits struct {
	mu       sync.Mutex
	limiters *cache.LRUExpireCache // key -> *rate.Limiter
	every    rate.Limit
	burst    int
}

// limiterIdle is how long a key's limiter outlives its last use: far
// longer than it takes to refill.
const limiterIdle = 10 * time.Minute

func newKeyedLimits(o Options, every float64, burst int) *keyedLimits {
	return &keyedLimits{limiters: NewCache(o), every: rate.Limit(every), burst: burst}
}

// allow takes one from key's budget; the empty key has none of its own.
func (s *keyedLimits) allow(key string) bool {
	if key == "" {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.limiters.Get(key)
	if !ok {
		l = rate.NewLimiter(s.every, s.burst)
	}
	s.limiters.Add(key, l, limiterIdle) // refreshes its idle time
	return l.(*rate.Limiter).Allow()
}
