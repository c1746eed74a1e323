package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/store"
)

// Ledger is a store load that knows what must be readable: writers upsert
// keys with growing versions (the value names its key and version), and
// readers check that what they read is not older than the last put
// acknowledged before the read began.
type Ledger struct {
	Client   *store.Client
	Writers  int           // one writer per key range
	Keys     int           // keys per writer
	Size     int           // value size in bytes (>= 64)
	Deadline time.Duration // per operation
	Rec      *Recorder
	Pace     time.Duration // pause between a writer's rounds (0: none; 50ms after a failure)

	mu    sync.Mutex
	acked map[string]int   // key -> last acknowledged version
	tried map[string][]int // key -> versions attempted but not acknowledged
	epoch time.Time        // puts acknowledged before this may be lost (HA failover)
	ackAt map[string]time.Time
}

func (l *Ledger) init() {
	l.mu.Lock()
	if l.acked == nil {
		l.acked, l.tried, l.ackAt = map[string]int{}, map[string][]int{}, map[string]time.Time{}
	}
	l.mu.Unlock()
}

func (l *Ledger) value(key string, v int) []byte {
	head := key + "|" + strconv.Itoa(v) + "|"
	b := bytes.Repeat([]byte{byte('a' + v%26)}, max(l.Size, len(head)))
	copy(b, head)
	return b
}

// parse returns the key and version a value names (false: not ours).
func parse(b []byte) (string, int, bool) {
	parts := bytes.SplitN(b, []byte("|"), 3)
	if len(parts) != 3 {
		return "", 0, false
	}
	v, err := strconv.Atoi(string(parts[1]))
	return string(parts[0]), v, err == nil
}

// Forget says that puts acknowledged before now may be lost (a new HA
// leader starts empty, as documented): they may read as not found, never
// as another value.
func (l *Ledger) Forget() {
	l.mu.Lock()
	l.epoch = time.Now()
	l.mu.Unlock()
}

// Run blocks until ctx ends: each writer puts its keys in turn and reads
// back a key it wrote earlier.
func (l *Ledger) Run(ctx context.Context) {
	l.init()
	var wg sync.WaitGroup
	for w := range l.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				key := fmt.Sprintf("chaos/w%d/k%d", w, i%l.Keys)
				ok := l.put(ctx, key, i/l.Keys+1)
				if i >= l.Keys/2 { // a key written half a round ago: its next upsert is half a round away
					ok = l.get(ctx, fmt.Sprintf("chaos/w%d/k%d", w, (i-l.Keys/2)%l.Keys)).Kind == KindOK && ok
				}
				if !ok || l.Pace > 0 {
					select { // a user retries after a pause, not in a tight loop
					case <-ctx.Done():
					case <-time.After(max(l.Pace, 50*time.Millisecond)):
					}
				}
			}
		}()
	}
	wg.Wait()
}

func (l *Ledger) put(ctx context.Context, key string, v int) bool {
	l.mu.Lock()
	l.tried[key] = append(l.tried[key], v)
	l.mu.Unlock()
	r := Result{Op: "put", Start: time.Now()}
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.Deadline)
	err := l.Client.PutWith(octx, key, l.value(key, v), store.PutOptions{Upsert: true, Replicas: 2})
	r.End = time.Now()
	r.Kind, r.Msg = classify(octx, err)
	if errors.Is(err, store.ErrHasLease) {
		r.Kind = KindLease
	}
	cancel()
	if err == nil {
		l.mu.Lock()
		if v > l.acked[key] {
			l.acked[key], l.ackAt[key] = v, r.End
		}
		l.mu.Unlock()
	}
	l.Rec.Add(r)
	return err == nil
}

// check judges a read of key started at start that returned b or err.
func (l *Ledger) check(key string, start time.Time, b []byte, err error) (string, string) {
	l.mu.Lock()
	acked, at, epoch := l.acked[key], l.ackAt[key], l.epoch
	tried := l.tried[key]
	l.mu.Unlock()
	failedAfter := false // an unacknowledged upsert after the acked one may have removed it
	for _, t := range tried {
		failedAfter = failedAfter || t > acked
	}
	if errors.Is(err, store.ErrNotFound) {
		if acked > 0 && at.Before(start) && at.After(epoch) && !failedAfter {
			return KindNotFound, fmt.Sprintf("%s: acknowledged v%d not found", key, acked)
		}
		return KindOK, ""
	}
	if err != nil {
		return "", "" // the caller classifies
	}
	k, v, ok := parse(b)
	if !ok || k != key || !bytes.Equal(b, l.value(key, v)) {
		return KindWrong, fmt.Sprintf("%s: read %.40q", key, b)
	}
	known := false
	for _, t := range tried {
		known = known || t == v
	}
	if !known {
		return KindWrong, fmt.Sprintf("%s: v%d was never written", key, v)
	}
	if at.Before(start) && v < acked && at.After(epoch) {
		return KindStale, fmt.Sprintf("%s: read v%d after v%d was acknowledged", key, v, acked)
	}
	return KindOK, ""
}

func (l *Ledger) get(ctx context.Context, key string) Result {
	r := Result{Op: "get", Start: time.Now()}
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.Deadline)
	b, err := l.Client.Get(octx, key)
	r.End = time.Now()
	r.Kind, r.Msg = l.check(key, r.Start, b, err)
	if r.Kind == "" {
		r.Kind, r.Msg = classify(octx, err)
	}
	cancel()
	l.Rec.Add(r)
	return r
}

// Verify reads every key once (no load running) and returns the failed
// reads: an acknowledged put not readable, a stale or wrong value.
func (l *Ledger) Verify(ctx context.Context) (checked int, bad []Result) {
	l.init()
	l.mu.Lock()
	keys := make([]string, 0, len(l.acked))
	for k := range l.acked {
		keys = append(keys, k)
	}
	l.mu.Unlock()
	for _, k := range keys {
		octx, cancel := context.WithTimeout(ctx, l.Deadline)
		start := time.Now()
		b, err := l.Client.Get(octx, k)
		kind, msg := l.check(k, start, b, err)
		if kind == "" {
			kind, msg = classify(octx, err)
		}
		cancel()
		checked++
		if kind != KindOK {
			bad = append(bad, Result{Op: "verify", Start: start, End: time.Now(), Kind: kind, Msg: msg})
		}
	}
	return checked, bad
}
