package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvcache-go/mooncake/internal/cluster"
	"github.com/kvcache-go/mooncake/internal/model"
	"github.com/kvcache-go/mooncake/internal/tokenizer"
	"github.com/kvcache-go/mooncake/transfer"
)

type benchPDFlags struct {
	model, sizes string
	requests     int
	outTokens    int
	seed         uint64
}

// newBenchPDCmd is `mooncake bench pd`: colocated vs disaggregated TTFT and
// TPOT, KV bytes and transfer time per request, as ratios to the transfer
// engine's own throughput and to the prefill time, measured in one run.
func newBenchPDCmd() *cobra.Command {
	var bf benchPDFlags
	cmd := &cobra.Command{
		Use:   "pd",
		Short: "Prefill/decode disaggregation: colocated vs disaggregated TTFT/TPOT and KV transfer cost",
		Long: `For each prompt size, runs --requests greedy streaming requests against a colocated engine
and through a proxy + prefill + decode cluster (all in this process, on loopback), and reports
medians: time to first token, time per output token, KV bytes moved per request, the prefill's
KV write time and its GB/s as a ratio of the transfer engine's own throughput measured in the
same run (same transport, same process), and the write time as a share of the prefill time.
The model is a built-in (tiny, small) whose context is stretched to fit the largest prompt.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBenchPD(cmd, bf) },
	}
	f := cmd.Flags()
	f.StringVar(&bf.model, "model", "small", "built-in model: tiny or small")
	f.StringVar(&bf.sizes, "sizes", "512,2048,8192", "prompt sizes in tokens, comma separated")
	f.IntVar(&bf.requests, "requests", 3, "requests per size and mode (medians are reported)")
	f.IntVar(&bf.outTokens, "output-tokens", 16, "tokens generated per request")
	f.Uint64Var(&bf.seed, "seed", 1, "weight seed")
	return cmd
}

type pdSample struct {
	ttft, total time.Duration
	bytes       float64
	writeMS     float64
	pullMS      float64
	writeReqs   float64
	load        string
	outTokens   int
}

func runBenchPD(cmd *cobra.Command, bf benchPDFlags) error {
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	var sizes []int
	for _, s := range strings.Split(bf.sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 2 {
			return &ExitError{Code: 2, Err: fmt.Errorf("--sizes: %q is not a token count >= 2", s)}
		}
		sizes = append(sizes, n)
	}
	if bf.requests < 1 || bf.outTokens < 2 {
		return &ExitError{Code: 2, Err: fmt.Errorf("--requests must be >= 1 and --output-tokens >= 2")}
	}
	mc, err := model.Builtin(bf.model)
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	maxLen := slices.Max(sizes) + bf.outTokens + 16
	if mc.MaxPositionEmbeddings < maxLen {
		mc.MaxPositionEmbeddings = maxLen
	}
	m, err := model.NewRandom(bf.model, mc, bf.seed)
	if err != nil {
		return err
	}
	blocks := (maxLen/16 + 8) * 2
	log := slog.New(slog.DiscardHandler)
	inst := cluster.InstanceConfig{NumBlocks: blocks, Logger: log, PullTimeout: 10 * time.Minute}
	col, err := cluster.StartInstance(ctx, cluster.InstanceConfig{Model: m, NumBlocks: blocks, Logger: log})
	if err != nil {
		return err
	}
	defer col.Close()
	c, err := cluster.Up(ctx, cluster.Config{Model: m, Tokenizer: tokenizer.ByteLevel{}, Instance: inst, Logger: log})
	if err != nil {
		return err
	}
	defer c.Close()
	bpt := 2 * mc.NumKeyValueHeads * mc.Dim() * 4 * mc.NumHiddenLayers
	fmt.Fprintf(out, "bench pd: model %s (%d layers, %d KV heads x %d, %d KV bytes/token), %d requests per size, %d output tokens\n",
		bf.model, mc.NumHiddenLayers, mc.NumKeyValueHeads, mc.Dim(), bpt, bf.requests, bf.outTokens)

	// The transfer engine's own throughput, same transport, same process:
	// one WRITE per layer of the 2048-token (or largest) KV size.
	teBytes := min(2048, slices.Max(sizes)) * bpt
	teGBs, memcpyGBs, transport, err := benchTE(ctx, teBytes/mc.NumHiddenLayers, mc.NumHiddenLayers)
	if err != nil {
		return fmt.Errorf("transfer engine bench: %w", err)
	}
	fmt.Fprintf(out, "transfer engine (%s, %d KiB writes over 64 MiB): %.2f GB/s; memcpy %.2f GB/s (engine = %.2f x memcpy)\n",
		transport, teBytes/mc.NumHiddenLayers>>10, teGBs, memcpyGBs, teGBs/memcpyGBs)
	fmt.Fprintf(out, "%7s %-6s %10s %10s %12s %8s %10s %9s %9s %9s %10s\n", "tokens", "mode", "TTFT ms", "TPOT ms", "KV bytes", "writes", "write ms", "GB/s", "xTE", "xTEsame", "write/pre")
	rng := rand.New(rand.NewPCG(bf.seed, 42))
	for _, n := range sizes {
		var colS, disS []pdSample
		for i := 0; i < bf.requests; i++ {
			p := randomPrompt(rng, n-1) // + BOS = n tokens
			s, err := benchRequest(ctx, col.URL, p, bf.outTokens)
			if err != nil {
				return fmt.Errorf("colocated %d tokens: %w", n, err)
			}
			colS = append(colS, s)
			p = randomPrompt(rng, n-1)
			s, err = benchRequest(ctx, c.URL, p, bf.outTokens)
			if err != nil {
				return fmt.Errorf("disaggregated %d tokens: %w", n, err)
			}
			if s.load != "remote" {
				return fmt.Errorf("disaggregated %d tokens: kv_load %q, want remote", n, s.load)
			}
			disS = append(disS, s)
		}
		cm, dm := medianSample(colS), medianSample(disS)
		prefillMS := float64(cm.ttft) / 1e6
		fmt.Fprintf(out, "%7d %-6s %10.1f %10.2f %12s %8s %10s %9s %9s %9s %10s\n", n, "coloc", prefillMS, tpotMS(cm), "-", "-", "-", "-", "-", "-", "-")
		gbs, same := 0.0, 0.0
		if dm.writeMS > 0 {
			gbs = dm.bytes / (dm.writeMS / 1e3) / 1e9
		}
		if dm.writeReqs > 0 {
			// The transfer engine alone with the same request size and count.
			reqSize := int(dm.bytes / dm.writeReqs)
			if same, _, _, err = benchTE(ctx, reqSize, int(dm.writeReqs)); err != nil {
				return fmt.Errorf("transfer engine bench: %w", err)
			}
		}
		fmt.Fprintf(out, "%7d %-6s %10.1f %10.2f %12.0f %8.0f %10.2f %9.2f %9.2f %9.2f %9.2f%%\n", n, "disagg", float64(dm.ttft)/1e6, tpotMS(dm),
			dm.bytes, dm.writeReqs, dm.writeMS, gbs, gbs/teGBs, gbs/max(same, 1e-9), 100*dm.writeMS/prefillMS)
	}
	fmt.Fprintln(out, "TTFT coloc = prefill time; write ms = prefill's KV write to decode (transfer engine); writes = transfer requests (one per run of consecutive blocks per layer); xTE = its GB/s over the transfer engine's own (large writes), xTEsame = over the engine's own with the same request size and count; write/pre = write time / colocated prefill time (aim < 10% at 2048 tokens)")
	return nil
}

func tpotMS(s pdSample) float64 {
	return float64(s.total-s.ttft) / 1e6 / float64(max(1, s.outTokens-1))
}

func medianSample(ss []pdSample) pdSample {
	med := func(f func(pdSample) float64) float64 {
		v := make([]float64, len(ss))
		for i, s := range ss {
			v[i] = f(s)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return pdSample{
		ttft:      time.Duration(med(func(s pdSample) float64 { return float64(s.ttft) })),
		total:     time.Duration(med(func(s pdSample) float64 { return float64(s.total) })),
		bytes:     med(func(s pdSample) float64 { return s.bytes }),
		writeMS:   med(func(s pdSample) float64 { return s.writeMS }),
		pullMS:    med(func(s pdSample) float64 { return s.pullMS }),
		writeReqs: med(func(s pdSample) float64 { return s.writeReqs }),
		outTokens: ss[0].outTokens,
	}
}

func randomPrompt(rng *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + rng.IntN(26))
	}
	return string(b)
}

// benchRequest streams one greedy completion and measures it.
func benchRequest(ctx context.Context, base, prompt string, outTokens int) (pdSample, error) {
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": outTokens, "temperature": 0,
		"stream": true, "ignore_eos": true, "return_token_ids": true})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return pdSample{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return pdSample{}, fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	s := pdSample{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") || line == "data: [DONE]" {
			continue
		}
		var o struct {
			Choices []struct {
				TokenIDs []int `json:"token_ids"`
			} `json:"choices"`
			KV map[string]any `json:"kv_transfer_params"`
		}
		if err := json.Unmarshal([]byte(line[6:]), &o); err != nil {
			return s, err
		}
		for _, c := range o.Choices {
			if len(c.TokenIDs) > 0 && s.ttft == 0 {
				s.ttft = time.Since(start)
			}
			s.outTokens += len(c.TokenIDs)
		}
		if o.KV != nil {
			s.load, _ = o.KV["kv_load"].(string)
			s.bytes, _ = o.KV["kv_pull_bytes"].(float64)
			s.writeMS, _ = o.KV["kv_write_ms"].(float64)
			s.pullMS, _ = o.KV["kv_pull_ms"].(float64)
			s.writeReqs, _ = o.KV["kv_write_requests"].(float64)
		}
	}
	s.total = time.Since(start)
	if s.outTokens == 0 {
		s.outTokens = outTokens
	}
	return s, sc.Err()
}

// benchTE measures the transfer engine writing requests of reqSize bytes
// between two engines of this process (managed memory, auto transport: what
// the P/D path uses) over at least 64 MiB (larger than the CPU caches, as
// KV blocks are), and single-thread memcpy over the same bytes.
func benchTE(ctx context.Context, reqSize, count int) (teGBs, memcpyGBs float64, transport string, err error) {
	const minTotal = 64 << 20
	if reqSize*count < minTotal {
		count = (minTotal + reqSize - 1) / reqSize
	}
	size := reqSize * count
	a, err := transfer.Open(ctx, transfer.Config{})
	if err != nil {
		return 0, 0, "", err
	}
	defer a.Close()
	b, err := transfer.Open(ctx, transfer.Config{})
	if err != nil {
		return 0, 0, "", err
	}
	defer b.Close()
	src, err := a.AllocateManaged(size)
	if err != nil {
		return 0, 0, "", err
	}
	dst, err := b.AllocateManaged(size)
	if err != nil {
		return 0, 0, "", err
	}
	for i := range src {
		src[i] = byte(i)
	}
	seg, err := a.OpenSegment(ctx, b.Name())
	if err != nil {
		return 0, 0, "", err
	}
	var reqs []transfer.Request
	for i := 0; i < count; i++ {
		reqs = append(reqs, transfer.Request{Op: transfer.OpWrite, Local: transfer.AddrOf(src) + uintptr(i*reqSize),
			Segment: seg, Remote: uint64(transfer.AddrOf(dst)) + uint64(i*reqSize), Length: reqSize})
	}
	run := func(f func() error) (float64, error) {
		var best time.Duration
		for i := 0; i < 5; i++ {
			t := time.Now()
			if err := f(); err != nil {
				return 0, err
			}
			if d := time.Since(t); i == 0 || d < best {
				best = d
			}
		}
		return float64(size) / best.Seconds() / 1e9, nil
	}
	batch, err := a.Submit(ctx, reqs)
	if err != nil {
		return 0, 0, "", err
	}
	if err := batch.Wait(ctx); err != nil {
		return 0, 0, "", err
	}
	transport = batch.Transport(0)
	batch.Free()
	if teGBs, err = run(func() error { return a.Transfer(ctx, reqs) }); err != nil {
		return 0, 0, "", err
	}
	plain := make([]byte, size)
	memcpyGBs, _ = run(func() error { copy(plain, src); return nil })
	return teGBs, memcpyGBs, transport, nil
}
