package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/waitfor"
)

func conductorQueue(t *testing.T, px *Proxy) (float64, int) {
	t.Helper()
	c, ok := px.pPol.(*Conductor)
	if !ok {
		t.Fatalf("prefill policy is %T, want *Conductor", px.pPol)
	}
	return c.Queue(px.prefill[0].url)
}

func queueEmpty(t *testing.T, px *Proxy) func() bool {
	return func() bool { s, n := conductorQueue(t, px); return s == 0 && n == 0 }
}

// A 50-byte prompt is predicted at 0.501s, a 200-byte one at 2.001s.
var testCost = CostModel{Fixed: 0.001, PerToken: 0.01}

func TestConductorSLORejectsOnPredictedLoad(t *testing.T) {
	pre := newFake(t, true, "x")
	pre.after = make(chan struct{}) // prefill halves wait: their estimate stays queued
	dec := newFake(t, false, "a")
	px, srv := newProxy(t, Config{Prefill: []string{pre.spec()}, Decode: []string{dec.spec()},
		PrefillPolicy: PolicyConductor, Cost: testCost, TTFTSLO: time.Second})
	short1, short2 := strings.Repeat("a", 50), strings.Repeat("b", 50)

	// Too long on its own: rejected before any upstream is contacted.
	code, body, hdr := post(t, srv.URL+"/v1/completions", `{"prompt":"`+strings.Repeat("c", 200)+`"}`)
	if code != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" {
		t.Fatalf("long prompt: code %d body %s", code, body)
	}
	var e struct {
		Error struct {
			Message, Type string
			Code          int
		}
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Type != "rate_limit_error" || e.Error.Code != 429 ||
		!strings.Contains(e.Error.Message, "TTFT SLO 1s") || !strings.Contains(e.Error.Message, "2.001s") {
		t.Fatalf("error body %s (%v)", body, err)
	}
	if len(pre.got())+len(dec.got()) != 0 {
		t.Fatal("a rejected request reached an upstream")
	}

	// Fits: served; its prefill half stays queued (0.501s predicted).
	if code, body, _ := post(t, srv.URL+"/v1/completions", `{"prompt":"`+short1+`"}`); code != 200 {
		t.Fatalf("short prompt: %d %s", code, body)
	}
	if s, n := conductorQueue(t, px); n != 1 || s < 0.5 || s > 0.502 {
		t.Fatalf("queue %v/%d, want ~0.501/1", s, n)
	}
	// Fits alone, but not behind the queued one: predicted load rejects it.
	if code, body, _ := post(t, srv.URL+"/v1/completions", `{"prompt":"`+short2+`"}`); code != 429 || !strings.Contains(body, "0.501s queued") {
		t.Fatalf("queued behind: %d %s", code, body)
	}
	close(pre.after)
	waitfor.Cond(t, 10*time.Second, "queue drained after prefill answered", queueEmpty(t, px))
	if code, body, _ := post(t, srv.URL+"/v1/completions", `{"prompt":"`+short2+`"}`); code != 200 {
		t.Fatalf("after drain: %d %s", code, body)
	}
	waitfor.Cond(t, 10*time.Second, "queue drained", queueEmpty(t, px))
	m := metrics(t, srv.URL)
	for _, want := range []string{"mooncake_proxy_ttft_slo_rejected_total 2", "mooncake_proxy_instance_queued_prefill_seconds{"} {
		if !strings.Contains(m, want) {
			t.Fatalf("metrics lack %q:\n%s", want, m)
		}
	}
}

func TestConductorQueueReleasedOnPrefillError(t *testing.T) {
	pre := newFake(t, true, "x")
	pre.status.Store(500)
	dec := newFake(t, false, "a")
	px, srv := newProxy(t, Config{Prefill: []string{pre.spec()}, Decode: []string{dec.spec()},
		PrefillPolicy: PolicyConductor, Cost: testCost})
	post(t, srv.URL+"/v1/completions", `{"prompt":"`+strings.Repeat("a", 50)+`"}`)
	waitfor.Cond(t, 10*time.Second, "prefill half answered", func() bool { return len(pre.got()) == 1 })
	waitfor.Cond(t, 10*time.Second, "queue released after a prefill 500", queueEmpty(t, px))
}

func TestConductorQueueReleasedOnClientCancel(t *testing.T) {
	pre := newFake(t, true, "x")
	pre.block.Store(true)
	dec := newFake(t, false, "a")
	dec.block.Store(true)
	px, srv := newProxy(t, Config{Prefill: []string{pre.spec()}, Decode: []string{dec.spec()},
		PrefillPolicy: PolicyConductor, Cost: testCost})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/completions",
		strings.NewReader(`{"prompt":"`+strings.Repeat("a", 50)+`","stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-pre.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("prefill half never arrived")
	}
	if _, n := conductorQueue(t, px); n != 1 {
		t.Fatalf("queued requests %d, want 1 while prefill runs", n)
	}
	cancel()
	resp.Body.Close()
	waitfor.Cond(t, 10*time.Second, "queue released after client cancel", queueEmpty(t, px))
}

func TestConductorQueueReleasedWhenNoDecode(t *testing.T) {
	pre := newFake(t, true, "x")
	dec := newFake(t, false, "a")
	px, srv := newProxy(t, Config{Prefill: []string{pre.spec()}, Decode: []string{dec.spec()},
		PrefillPolicy: PolicyConductor, Cost: testCost})
	dec.healthy.Store(false)
	px.CheckNow(context.Background())
	px.CheckNow(context.Background()) // FailAfter 2
	if code, body, _ := post(t, srv.URL+"/v1/completions", `{"prompt":"p"}`); code != 503 {
		t.Fatalf("code %d body %s", code, body)
	}
	if s, n := conductorQueue(t, px); s != 0 || n != 0 {
		t.Fatalf("queue %v/%d leaked after a 503 on decode", s, n)
	}
}
