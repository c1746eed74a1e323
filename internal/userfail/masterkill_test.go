package userfail

import (
	"context"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/chaos"
	"github.com/kvcache-go/mooncake/internal/testbed"
)

// TestMasterKilledUnderPDAndStoreLoad: on the test bed, a P/D pair behind
// the proxy and two engines using the store as a KV pool (--kv-connector
// store) all stream completions while the store's master is killed with
// SIGKILL and restarted on its port. Every completion that answered equals
// a colocated engine's output token for token (none garbled), every
// request ended within its deadline, and the store engines still answer
// after the restart. (A Mooncake user's outputs became garbled when the
// master was killed during serving.)
func TestMasterKilledUnderPDAndStoreLoad(t *testing.T) {
	hold := 3 * time.Second
	if os.Getenv("MOONCAKE_CHAOS") == "long" {
		hold = 10 * time.Second
	}
	bed := testbed.ForTest(t, chaos.Hosts, testbed.Binary(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h := bed.Hosts()
	masterArgs := []string{"--port", "50051", "--client-ttl", "3s", "--lease-ttl", "1s"}
	m, err := h[0].StartMaster(ctx, masterArgs...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h[1].StartStore(ctx, m.GRPC, "64MiB", "--ping-interval", "200ms"); err != nil {
		t.Fatal(err)
	}
	pre, err := h[1].StartServe(ctx, "producer", "--kv-connector-config", `{"abort_timeout_s":5}`)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := h[3].StartServe(ctx, "consumer", "--kv-connector-config", `{"pull_timeout_s":2}`)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := h[0].StartProxy(ctx, []string{pre.Spec()}, []string{dec.URL})
	if err != nil {
		t.Fatal(err)
	}
	var kvEngines []string
	for _, host := range []*testbed.Host{h[2], h[4]} {
		e, err := host.StartServe(ctx, "both", "--kv-connector", "store", "--kv-connector-config", `{"master":"`+m.GRPC+`"}`)
		if err != nil {
			t.Fatal(err)
		}
		kvEngines = append(kvEngines, e.URL)
	}
	ref, err := h[5].StartServe(ctx, "both")
	if err != nil {
		t.Fatal(err)
	}
	want, err := chaos.Reference(ctx, ref.URL)
	if err != nil {
		t.Fatal(err)
	}
	var rec chaos.Recorder
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var next int
	var mu sync.Mutex
	kvURL := func() string { // alternate between the two store engines
		mu.Lock()
		defer mu.Unlock()
		next++
		return kvEngines[next%2]
	}
	for _, l := range []*chaos.Load{
		{Workers: 2, Deadline: 15 * time.Second, URL: func() string { return proxy.URL }, Want: want, Rec: &rec},
		{Workers: 3, Deadline: 15 * time.Second, URL: kvURL, Want: want, Rec: &rec},
	} {
		wg.Go(func() { l.Run(lctx) })
	}
	waitCompletions(t, &rec, 20, 60*time.Second) // the store engines have saved blocks
	m.Kill()
	<-m.Done()
	fault := time.Now()
	if _, err := h[0].StartMaster(ctx, masterArgs...); err != nil {
		t.Fatal(err)
	}
	before := len(rec.Results())
	waitCompletions(t, &rec, before+20, 60*time.Second)
	for time.Since(fault) < hold { // the load runs on past the restart
		time.Sleep(100 * time.Millisecond) // pacing of the hold, the load works meanwhile
	}
	stop()
	wg.Wait()
	res := rec.Results()
	s := chaos.Summarize(res, fault)
	t.Logf("%d completions around a master SIGKILL+restart: %v; recovery %v, longest %v; %v", s.Total, s.Kinds, s.Recovery, s.Longest, s.Messages)
	if s.Kinds[chaos.KindWrong] > 0 || s.Kinds[chaos.KindDeadline] > 0 {
		t.Fatalf("%d wrong outputs, %d requests past their deadline: %v", s.Kinds[chaos.KindWrong], s.Kinds[chaos.KindDeadline], s.Messages)
	}
	late := 0
	for _, r := range res {
		if r.Start.After(fault.Add(hold/2)) && r.Kind == chaos.KindOK {
			late++
		}
	}
	if late == 0 {
		t.Fatal("no completion succeeded after the master restart")
	}
	for _, u := range kvEngines { // the store engines still serve, with the right tokens
		for p, toks := range want {
			r, got := chaos.Complete(ctx, &http.Client{}, u, p, toks)
			if r.Kind != chaos.KindOK {
				t.Fatalf("%s after the restart: %s %s (got %v)", u, r.Kind, strings.TrimSpace(r.Msg), got)
			}
			break
		}
	}
}

// waitCompletions waits until rec holds n successful results.
func waitCompletions(t *testing.T, rec *chaos.Recorder, n int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok := 0
		for _, r := range rec.Results() {
			if r.Kind == chaos.KindOK {
				ok++
			}
		}
		if ok >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d completions succeeded within %v", ok, n, d)
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
}
