package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvcache-go/mooncake/internal/grant"
	"github.com/kvcache-go/mooncake/internal/master"
	"github.com/kvcache-go/mooncake/internal/masterserver"
	"github.com/kvcache-go/mooncake/internal/storenode"
	pb "github.com/kvcache-go/mooncake/internal/storepb"
	"github.com/kvcache-go/mooncake/internal/waitfor"
	"github.com/kvcache-go/mooncake/store"
	"github.com/kvcache-go/mooncake/transfer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// newGrantCluster is a cluster whose master signs grants and whose storage
// nodes check them (all engines share one transfer-engine secret); with
// keys nil, the same cluster without grants.
func newGrantCluster(t testing.TB, core master.Config, nodes int, segSize uint64, keys *grant.Keyring, transport string) *cluster {
	t.Helper()
	return newGrantClusterWith(t, masterserver.ServerConfig{Core: core}, nodes, segSize, keys, transport)
}

// newGrantClusterWith is newGrantCluster with more of the master's
// configuration (Addr, TickInterval and Grants are set here); the nodes
// hold the master's Secret.
func newGrantClusterWith(t testing.TB, mcfg masterserver.ServerConfig, nodes int, segSize uint64, keys *grant.Keyring, transport string) *cluster {
	t.Helper()
	mcfg.Addr, mcfg.TickInterval, mcfg.Grants = "127.0.0.1:0", 5*time.Millisecond, keys
	c := &cluster{t: t, transport: transport, mcfg: mcfg}
	var err error
	if c.master, err = masterserver.Start(c.mcfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.master.Close() })
	var v *grant.Verifier
	if keys != nil {
		v = grant.NewVerifier(keys, nil)
	}
	for range nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		n, err := storenode.Start(ctx, storenode.Config{Master: c.master.Addr(), Secret: mcfg.Secret, SegmentSize: segSize,
			Engine:       transfer.Config{Secret: grantTestSecret, Grants: v, Transport: c.transport},
			PingInterval: 20 * time.Millisecond, UnmountGrace: 200 * time.Millisecond})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, n)
		t.Cleanup(func() { n.Close() })
	}
	return c
}

const grantTestSecret = "transfer-engine-secret"

func grantKeys(t testing.TB) *grant.Keyring {
	t.Helper()
	k, err := grant.ParseKeys([]byte("1:" + grant.NewKeyHex() + "\n2:" + grant.NewKeyHex()))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func grantClient(c *cluster) *store.Client {
	return c.client(func(cfg *store.Config) {
		eng, err := transfer.Open(context.Background(), transfer.Config{Secret: grantTestSecret, Transport: c.transport})
		if err != nil {
			c.t.Fatal(err)
		}
		c.t.Cleanup(func() { eng.Close() })
		cfg.Mover = eng
		cfg.LocalBufferSize = 4 << 20
	})
}

func deniedTotal(t *testing.T, n *storenode.Node) int {
	t.Helper()
	rec := httptest.NewRecorder()
	n.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	m := regexp.MustCompile(`(?m)^mooncake_storenode_transfers_denied_total\{[^}]*\} (\d+)$`).FindStringSubmatch(rec.Body.String())
	if m == nil {
		return 0
	}
	v, _ := strconv.Atoi(m[1])
	return v
}

// metric returns the node's counter name (0 when absent).
func metric(t *testing.T, n *storenode.Node, name string) int {
	t.Helper()
	rec := httptest.NewRecorder()
	n.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	m := regexp.MustCompile(`(?m)^` + name + `\{[^}]*\} (\d+)$`).FindStringSubmatch(rec.Body.String())
	if m == nil {
		return 0
	}
	v, _ := strconv.Atoi(m[1])
	return v
}

// TestGrantsReusedSlot: upserts of a key set, round after round, write
// into the space of the versions they replace (reused put slots); the
// master hands out the WRITE grant that extent had, which goes to the
// lane that sent it (its home lane, idle with one client), and that lane
// does not send it again: the node verifies no grant again. Every value
// reads back and nothing is denied.
func TestGrantsReusedSlot(t *testing.T) {
	c := newGrantCluster(t, master.Config{}, 1, 64<<20, grantKeys(t), transfer.TransportTCP)
	cl := grantClient(c)
	ctx := context.Background()
	const keys = 16
	for round := range 4 {
		for k := range keys {
			if err := cl.PutWith(ctx, fmt.Sprint("k", k), value(fmt.Sprint("k", k, round), 4096), store.PutOptions{Upsert: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The later rounds' puts reuse the extents and so the grants of the
	// first: the lane that sent one does not send it again, and the node
	// does not verify it again. (A grant's expiry is rounded to a step of
	// some seconds: rounds that straddle a step's end get new grants,
	// once.)
	if verified := metric(t, c.nodes[0], "mooncake_storenode_grants_verified_total"); verified > 2*keys+keys/2 {
		t.Fatalf("%d grants verified for %d puts, want at most about %d (the first round's, and a step's end)", verified, 4*keys, 2*keys)
	}
	if d := metric(t, c.nodes[0], "mooncake_storenode_transfers_denied_total"); d != 0 {
		t.Fatalf("%d transfers denied", d)
	}
	for k := range keys {
		got, err := cl.Get(ctx, fmt.Sprint("k", k))
		if err != nil || !bytes.Equal(got, value(fmt.Sprint("k", k, 3), 4096)) {
			t.Fatalf("k%d: %v", k, err)
		}
	}
}

// TestGrantsStore: a client that holds valid transfer-engine credentials
// and the master's grants for its own objects tries to read and write
// another client's object, free space and a neighbouring extent, with no,
// foreign, widened, other-key and expired grants. Each attempt is
// refused, the node's memory reads back unchanged, and the store keeps
// serving both clients.
func TestGrantsStore(t *testing.T) {
	keys := grantKeys(t)
	const lease = 3 * time.Second
	c := newGrantCluster(t, master.Config{LeaseTTL: lease}, 1, 4<<20, keys, "")
	node := c.nodes[0]
	victim, attacker := grantClient(c), grantClient(c)
	ctx := ctxT(t)
	secret := value("victim", 64<<10)
	if err := victim.Put(ctx, "victim", secret); err != nil {
		t.Fatal(err)
	}
	if err := attacker.Put(ctx, "mine", value("mine", 64<<10)); err != nil {
		t.Fatal(err)
	}
	big := value("big", 1<<20)
	if err := victim.Put(ctx, "big", big); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string][]byte{"victim": secret, "big": big} {
		if got, err := victim.Get(ctx, k); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("get %s with grants: %v", k, err)
		}
	}

	// The attacker's view: the master's replies (with grants) and a raw
	// transfer engine holding the cluster's engine secret.
	conn, err := grpc.NewClient(c.master.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	mc := pb.NewMasterServiceClient(conn)
	info := func(key string) *pb.Replica {
		t.Helper()
		r, err := mc.GetReplicaList(ctx, &pb.KeyRequest{Key: key})
		if err != nil || r.Status.GetCode() != 0 || len(r.Replicas) != 1 {
			t.Fatalf("replica list of %s: %v %v", key, err, r.GetStatus())
		}
		if len(r.Replicas[0].Grant) == 0 {
			t.Fatalf("replica list of %s carries no grant", key)
		}
		return r.Replicas[0]
	}
	vic, mine := info("victim"), info("mine")
	ps, err := mc.PutStart(ctx, &pb.PutStartRequest{ClientId: "attacker", Key: "mine2", Size: 4096})
	if err != nil || ps.Status.GetCode() != 0 || len(ps.Replicas) != 1 || len(ps.Replicas[0].Grant) == 0 {
		t.Fatalf("put start: %v %v", err, ps.GetStatus())
	}
	mine2 := ps.Replicas[0]
	seg := node.Client().Segment()
	base := uint64(transfer.AddrOf(seg))
	end := base + uint64(len(seg))
	widened := bytes.Clone(mine.Grant)
	widened[21] ^= 0x01 // length + 256 bytes: the signature breaks
	other, _ := grant.NewKeyring(map[uint32][]byte{2: []byte("the-attacker-own-key-0123")})
	forged, _ := other.Encode(grant.Grant{Segment: node.Name(), Addr: vic.Addr, Length: vic.Size, Mode: grant.Read | grant.Write, Expires: time.Now().Add(time.Hour)})

	snapshot := bytes.Clone(seg)
	before := deniedTotal(t, node)
	attempts := []struct {
		name   string
		op     transfer.Opcode
		remote uint64
		n      int
		grant  []byte
	}{
		{"read victim, no grant", transfer.OpRead, vic.Addr, int(vic.Size), nil},
		{"write victim, no grant", transfer.OpWrite, vic.Addr, int(vic.Size), nil},
		{"read victim with own read grant", transfer.OpRead, vic.Addr, int(vic.Size), mine.Grant},
		{"write victim with own put grant", transfer.OpWrite, vic.Addr, 4096, mine2.Grant},
		{"read neighbour extent", transfer.OpRead, mine.Addr, int(mine.Size) + 4096, mine.Grant},
		{"read free space", transfer.OpRead, end - 8192, 8192, mine.Grant},
		{"write free space", transfer.OpWrite, end - 8192, 4096, mine2.Grant},
		{"write own object with read grant", transfer.OpWrite, mine.Addr, 4096, mine.Grant},
		{"widened grant", transfer.OpRead, mine.Addr, int(mine.Size) + 256, widened},
		{"other-key grant", transfer.OpRead, vic.Addr, int(vic.Size), forged},
		{"victim's grant replayed on a write", transfer.OpWrite, vic.Addr, int(vic.Size), vic.Grant},
	}
	run := func(op transfer.Opcode, remote uint64, n int, g []byte) ([]byte, error) {
		t.Helper()
		eng, err := transfer.Open(ctx, transfer.Config{Secret: grantTestSecret}) // fresh lanes each time
		if err != nil {
			t.Fatal(err)
		}
		defer eng.Close()
		buf := make([]byte, n)
		if op == transfer.OpWrite {
			for i := range buf {
				buf[i] = 0xEE
			}
		}
		if err := eng.RegisterBytes(buf, ""); err != nil {
			t.Fatal(err)
		}
		sid, err := eng.OpenSegment(ctx, node.Name())
		if err != nil {
			t.Fatal(err)
		}
		return buf, eng.Transfer(ctx, []transfer.Request{{Op: op, Local: transfer.AddrOf(buf), Segment: sid, Remote: remote, Length: n, Grant: string(g)}})
	}
	for _, a := range attempts {
		t.Run(a.name, func(t *testing.T) {
			buf, err := run(a.op, a.remote, a.n, a.grant)
			if !errors.Is(err, transfer.ErrDenied) {
				t.Fatalf("err = %v, want ErrDenied", err)
			}
			if a.op == transfer.OpRead && bytes.Count(buf, []byte{0}) != len(buf) {
				t.Fatal("bytes leaked")
			}
			if !bytes.Equal(seg, snapshot) {
				t.Fatal("node memory changed")
			}
		})
	}
	// Legit uses of the same grants pass: the checks are exact, not blanket.
	mine = info("mine")
	if got, err := run(transfer.OpRead, mine.Addr, int(mine.Size), mine.Grant); err != nil || !bytes.Equal(got, value("mine", 64<<10)) {
		t.Fatalf("own read with own grant: %v", err)
	}
	// Expired: once the read lease has ended, its grant reads nothing.
	g, _, err := grant.Decode(mine.Grant)
	if err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, 5*time.Second, "the read grant's expiry", func() bool { return time.Now().After(g.Expires) })
	if _, err := run(transfer.OpRead, mine.Addr, int(mine.Size), mine.Grant); !errors.Is(err, transfer.ErrDenied) {
		t.Fatalf("expired grant: %v", err)
	}
	if d := deniedTotal(t, node) - before; d < len(attempts)+1 {
		t.Fatalf("node counted %d denied transfers, want >= %d", d, len(attempts)+1)
	}
	if !bytes.Equal(seg, snapshot) {
		t.Fatal("node memory changed")
	}
	// Still serving.
	for _, cl := range []*store.Client{victim, attacker} {
		if got, err := cl.Get(ctx, "victim"); err != nil || !bytes.Equal(got, secret) {
			t.Fatalf("get after the attacks: %v", err)
		}
	}
	if err := attacker.Put(ctx, "after", value("after", 4096)); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkGrants: put (upsert) and get of 4 KiB and 1 MiB by 1 and 8
// clients, grants off and on, over TCP (a node with grants offers no
// shared memory, so the off runs use TCP too). Each client works on its
// own key set (together a quarter of the pool, at most 256 keys each, as
// in `mooncake bench store`), in order for puts, at random for gets, so
// the lanes and the verifier see as many grants as they do there. The off
// and on runs of one configuration follow each other; compare them run by
// run (invoke the test binary several times: scripts/bench-grants.sh).
// GRANTS_KEYS=N gives each client N keys instead (16384: the key set of
// `mooncake bench store --security`'s 4 KiB x1, more grants than the
// master and the node keep).
func BenchmarkGrants(b *testing.B) {
	for _, size := range []int{4 << 10, 1 << 20} {
		for _, clients := range []int{1, 8} {
			for _, op := range []string{"put", "get"} {
				for _, on := range []bool{false, true} {
					b.Run(fmt.Sprintf("%s/%dKiB/x%d/grants=%v", op, size>>10, clients, on), func(b *testing.B) {
						benchGrants(b, op, size, clients, on)
					})
				}
			}
		}
	}
}

func benchGrants(b *testing.B, op string, size, clients int, on bool) {
	var keys *grant.Keyring
	if on {
		keys = grantKeys(b)
	}
	// The same cluster either way but for the grants: engine secret, TCP
	// (a node with grants offers no shared memory).
	const segSize = 128 << 20
	c := newGrantCluster(b, master.Config{Durable: os.Getenv("GRANTS_DURABLE") != ""}, 1, segSize, keys, transfer.TransportTCP)
	ctx := context.Background()
	cls := make([]*store.Client, clients)
	v := value("bench", size)
	perClient := max(2, min(256, segSize/4/size/clients))
	if k, _ := strconv.Atoi(os.Getenv("GRANTS_KEYS")); k > 0 {
		perClient = k
	}
	for i := range cls {
		cls[i] = grantClient(c)
		for k := range perClient {
			if err := cls[i].PutWith(ctx, fmt.Sprintf("bench-%d/%d", i, k), v, store.PutOptions{Upsert: true}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	var wg sync.WaitGroup
	errs := make([]error, clients)
	for i, cl := range cls {
		n := b.N / clients
		if i < b.N%clients {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 7))
			for j := range n {
				var err error
				if op == "get" {
					_, err = cl.Get(ctx, fmt.Sprintf("bench-%d/%d", i, r.IntN(perClient)))
				} else {
					err = cl.PutWith(ctx, fmt.Sprintf("bench-%d/%d", i, j%perClient), v, store.PutOptions{Upsert: true})
				}
				if err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	// CPU time of the whole process (clients, master and node) per op:
	// steadier than ns/op on a machine shared with other work.
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkGrantsPaired: put (upsert, in turn over a key set) and get (at
// random) of 4 KiB and 1 MiB by one client of a pool without grants and
// one of a pool with them, one op of each in turn (which goes first
// alternates), so that both pools see the same moments of a shared
// machine's load. Reports, grants on over off, the latency quartiles'
// ratios and the ops/s ratio (the off ops' total time over the on ops':
// a mean, so a few stalls of the machine move it). Steadier than
// comparing pools run one after the other where other work comes and
// goes. (With several clients at once both pools queue for the same CPUs,
// which hides what each op costs: measure those with BenchmarkGrants or
// `mooncake bench store --grants both` on a quiet host.)
func BenchmarkGrantsPaired(b *testing.B) {
	for _, size := range []int{4 << 10, 1 << 20} {
		for _, clients := range []int{1} {
			for _, op := range []string{"put", "get"} {
				b.Run(fmt.Sprintf("%s/%dKiB/x%d", op, size>>10, clients), func(b *testing.B) {
					benchGrantsPaired(b, op, size, clients)
				})
			}
		}
	}
}

func benchGrantsPaired(b *testing.B, op string, size, clients int) {
	ctx := context.Background()
	v := value("bench", size)
	const segSize = 128 << 20
	perClient := max(2, min(256, segSize/4/size/clients))
	cls := make([][2]*store.Client, clients)
	for p, k := range []*grant.Keyring{nil, grantKeys(b)} {
		c := newGrantCluster(b, master.Config{}, 1, segSize, k, transfer.TransportTCP)
		for i := range cls {
			cls[i][p] = grantClient(c)
			for j := range perClient {
				if err := cls[i][p].PutWith(ctx, fmt.Sprintf("bench/%d/%d", i, j), v, store.PutOptions{Upsert: true}); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	lats := make([][2][]time.Duration, clients)
	errs := make([]error, clients)
	b.ResetTimer()
	var wg sync.WaitGroup
	for i := range cls {
		n := b.N / clients
		if i < b.N%clients {
			n++
		}
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 2))
			for j := range n {
				key := fmt.Sprintf("bench/%d/%d", i, j%perClient)
				if op == "get" {
					key = fmt.Sprintf("bench/%d/%d", i, r.IntN(perClient))
				}
				for s := range 2 {
					p := s ^ j&1
					t0 := time.Now()
					var err error
					if op == "put" {
						err = cls[i][p].PutWith(ctx, key, v, store.PutOptions{Upsert: true})
					} else {
						_, err = cls[i][p].Get(ctx, key)
					}
					if err != nil {
						errs[i] = err
						return
					}
					lats[i][p] = append(lats[i][p], time.Since(t0))
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	var lat [2][]time.Duration
	var sum [2]time.Duration
	for _, l := range lats {
		for p := range lat {
			lat[p] = append(lat[p], l[p]...)
			for _, d := range l[p] {
				sum[p] += d
			}
		}
	}
	for p := range lat {
		slices.Sort(lat[p])
	}
	b.ReportMetric(float64(sum[0])/float64(sum[1]), "ops/s-on/off")
	for _, q := range []struct {
		name string
		at   float64
	}{{"p25", 0.25}, {"p50", 0.5}, {"p75", 0.75}} {
		k := int(float64(len(lat[0])-1) * q.at)
		b.ReportMetric(float64(lat[1][k])/float64(lat[0][k]), q.name+"-on/off")
	}
}

// processCPU is this process's CPU time (user + system) so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
