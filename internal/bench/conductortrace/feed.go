// Package conductortrace replays a trace's routing through a real
// `mooncake conductor`: N simulated prefill instances publish their cache
// events over ZMQ (kvevents.Publisher, one each, vLLM's wire format) to a
// conductor service on loopback, registered with it over HTTP, and the
// router reads every request's cached prefixes with POST /query_by_hash
// over HTTP.
// It is a tracesim.PrefixFeed: `mooncake bench trace --conductor` runs the
// cache-aware and conductor routers on it, next to the same routers fed by
// an in-process index (their hit rates must be equal: same events, same
// prefixes) and to round-robin and least-loaded.
//
// A trace block id is already a chained identity, so each block travels as
// a one-token block (token = its id) with no parent, block_size 1: the
// conductor names it by the standard local hash of that token, and the
// router asks by those hashes.
package conductortrace

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvcache-go/mooncake/internal/conductor"
	"github.com/kvcache-go/mooncake/internal/conductor/service"
	"github.com/kvcache-go/mooncake/internal/kvevents"
	"github.com/kvcache-go/mooncake/internal/tracesim"
)

// SyncTimeout bounds the wait for the conductor to apply what was
// published before a query.
const SyncTimeout = 10 * time.Second

// Feed is a tracesim.PrefixFeed backed by a conductor over the network.
type Feed struct {
	n       int
	base    string // the conductor's URL
	client  *http.Client
	pubs    []*kvevents.Publisher
	pending [][]kvevents.Event
	sent    []uint64 // batches published per instance

	// Queries and Batches count what went over the wire.
	Queries, Batches int

	svc    *service.Service
	hasher conductor.Hasher
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Streams reports the conductor's view of each instance's event stream:
// batches applied, gaps, replayed, and the blocks lost (clears).
func (f *Feed) Streams() string {
	var sb strings.Builder
	st := f.svc.Index().Stats()
	for k, s := range f.svc.SubStats() {
		fmt.Fprintf(&sb, "%s: %+v %+v\n", k, s, st[k])
	}
	return sb.String()
}

var _ tracesim.PrefixFeed = (*Feed)(nil)

// New starts a conductor service on loopback and n publishers registered
// with it; Close stops them.
func New(n int) (*Feed, error) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &Feed{n: n, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}, cancel: cancel,
		pending: make([][]kvevents.Event, n), sent: make([]uint64, n)}
	svc := service.New(service.Config{})
	f.svc, f.hasher = svc, conductor.NewHasher(conductor.DefaultSeed)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		return nil, err
	}
	f.base = "http://" + ln.Addr().String()
	f.wg.Add(1)
	go func() { defer f.wg.Done(); svc.Run(ctx, ln) }()
	for i := 0; i < n; i++ {
		p, err := kvevents.NewPublisher(kvevents.Config{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0",
			BlockSize: 1, MapEncoding: i%2 == 0, BufferSteps: 1 << 16})
		if err != nil {
			f.Close()
			return nil, err
		}
		f.wg.Add(1)
		go func() { defer f.wg.Done(); p.Run(ctx) }()
		select {
		case <-p.Ready():
		case <-time.After(SyncTimeout):
			f.Close()
			return nil, fmt.Errorf("conductortrace: publisher %d not ready", i)
		}
		f.pubs = append(f.pubs, p)
		ep, rep := p.Endpoints()
		body, _ := json.Marshal(map[string]any{"endpoint": ep, "replay_endpoint": rep, "type": "vLLM", "modelname": "trace",
			"instance_id": name(i), "block_size": 1, "dp_rank": 0})
		if err := f.post("/register", body, nil); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// Close stops the conductor and the publishers.
func (f *Feed) Close() {
	f.cancel()
	f.wg.Wait()
	f.client.CloseIdleConnections()
}

func name(i int) string { return "instance-" + strconv.Itoa(i) }

type events struct {
	f *Feed
	i int
}

// Events implements tracesim.PrefixFeed.
func (f *Feed) Events(i int) tracesim.CacheEvents { return events{f, i} }

func (e events) Stored(id int64) {
	e.f.pending[e.i] = append(e.f.pending[e.i], kvevents.BlockStored{BlockHashes: []kvevents.Hash{kvevents.IntHash(uint64(id))},
		TokenIDs: []int{int(id)}, BlockSize: 1, Medium: kvevents.MediumGPU})
}

func (e events) Removed(id int64) {
	e.f.pending[e.i] = append(e.f.pending[e.i], kvevents.BlockRemoved{BlockHashes: []kvevents.Hash{kvevents.IntHash(uint64(id))}, Medium: kvevents.MediumGPU})
}

// Prefixes publishes the pending events, waits until the conductor has
// applied every batch (GET /registrations; a batch lost on the PUB socket
// is recovered by the subscriber's replay, which a heartbeat batch
// triggers), then asks POST /query_by_hash.
func (f *Feed) Prefixes(ids []int64, into []int) error {
	for i, evs := range f.pending {
		if len(evs) > 0 {
			f.pubs[i].Publish(evs...)
			f.sent[i]++
			f.Batches++
			f.pending[i] = nil
		}
	}
	if err := f.sync(); err != nil {
		return err
	}
	// Each block was announced without a parent (its id is the chained
	// identity), so the conductor named it by its local hash: query by
	// those hashes.
	seqs := make([]uint64, len(ids))
	for i, id := range ids {
		seqs[i] = f.hasher.Local([]uint32{uint32(id)})
	}
	body, _ := json.Marshal(map[string]any{"model": "trace", "block_size": 1, "seq_hashes": seqs})
	var ans map[string]map[string]struct {
		GPU int `json:"GPU"`
	}
	if err := f.post("/query_by_hash", body, &ans); err != nil {
		return err
	}
	f.Queries++
	for i := range into {
		into[i] = ans["default"][name(i)].GPU
	}
	return nil
}

// sync waits until every instance's published batches are applied.
func (f *Feed) sync() error {
	deadline := time.Now().Add(SyncTimeout)
	for tries := 0; ; tries++ {
		var regs struct {
			Registrations []struct {
				Instance string `json:"instance_id"`
				Events   struct{ Batches uint64 }
			} `json:"registrations"`
		}
		if err := f.get("/registrations", &regs); err != nil {
			return err
		}
		behind := map[int]bool{}
		for i := 0; i < f.n; i++ {
			behind[i] = f.sent[i] > 0
		}
		for _, r := range regs.Registrations {
			for i := 0; i < f.n; i++ {
				if r.Instance == name(i) && r.Events.Batches >= f.sent[i] {
					behind[i] = false
				}
			}
		}
		late := false
		for i, b := range behind {
			if b {
				late = true
				if tries > 0 && tries%20 == 0 {
					// A subscriber that missed the last batch learns of the
					// gap only from the next one.
					f.pubs[i].Publish()
					f.sent[i]++
				}
			}
		}
		if !late {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("conductortrace: the conductor did not apply the published events within %v", SyncTimeout)
		}
		time.Sleep(100 * time.Microsecond) // a poll interval, bounded by the deadline
	}
}

func (f *Feed) post(path string, body []byte, out any) error {
	resp, err := f.client.Post(f.base+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e map[string]any
		json.NewDecoder(resp.Body).Decode(&e)
		return fmt.Errorf("conductortrace: %s: %s %v", path, resp.Status, e)
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}

func (f *Feed) get(path string, out any) error {
	resp, err := f.client.Get(f.base + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("conductortrace: %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
