package master

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/kvcache-go/mooncake/internal/bench/benchproc"
	"io"
	"net"
	"strconv"
	"strings"
)

// ErrRedisMissing is Result.RedisSkipped when redis-server is not
// installed (Debian: apt-get install redis-server).
var ErrRedisMissing = benchproc.ErrRedisServerMissing

// redisServer is a redis-server of the bench on a free loopback port.
type redisServer struct {
	addr string
	pid  int    // 0: a running Redis given by address, not ours
	stop func() // kills it and removes its directory
}

// startRedis finds the Redis to compare with: "off" or "" -> none (nil);
// "auto" -> redis-server started on a free loopback port, without
// persistence; otherwise HOST:PORT of a running Redis.
func startRedis(ctx context.Context, mode string) (*redisServer, error) {
	switch mode {
	case "off", "":
		return nil, nil
	case "auto":
	default:
		if _, _, err := net.SplitHostPort(mode); err != nil {
			return nil, fmt.Errorf("--redis %q: want auto, off or HOST:PORT", mode)
		}
		return &redisServer{addr: mode, stop: func() {}}, nil
	}
	r, err := benchproc.StartRedis(ctx)
	if errors.Is(err, benchproc.ErrRedisServerMissing) {
		return nil, ErrRedisMissing
	}
	if err != nil {
		return nil, err
	}
	return &redisServer{addr: r.Addr, pid: r.PID, stop: r.Stop}, nil
}

// respConn is a minimal Redis client: the few commands the bench sends
// (SET, GET, INFO, FLUSHALL), pipelined. It is hand-written because go.mod
// has no Redis client and the bench needs distinct sequential keys
// (redis-benchmark's -r keys are random) and per-call latencies in the
// same histogram as the store's.
type respConn struct {
	c net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

func dialRedis(ctx context.Context, addr string) (*respConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("redis at %s: %w", addr, err)
	}
	return &respConn{c: c, r: bufio.NewReaderSize(c, 64<<10), w: bufio.NewWriterSize(c, 64<<10)}, nil
}

func (r *respConn) close() { r.c.Close() }

// maxBulk is the largest bulk string accepted (Redis's default
// proto-max-bulk-len).
const maxBulk = 512 << 20

// write queues one command (an array of bulk strings).
func (r *respConn) write(args ...[]byte) {
	r.w.WriteByte('*')
	r.w.WriteString(strconv.Itoa(len(args)))
	r.w.WriteString("\r\n")
	for _, a := range args {
		r.w.WriteByte('$')
		r.w.WriteString(strconv.Itoa(len(a)))
		r.w.WriteString("\r\n")
		r.w.Write(a)
		r.w.WriteString("\r\n")
	}
}

// read reads one reply: a status or integer (returned as text), a bulk
// string (nil for a null bulk), or an error reply as an error.
func (r *respConn) read() ([]byte, error) {
	line, err := r.r.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 {
		return nil, fmt.Errorf("redis: short reply %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+', ':':
		return append([]byte(nil), body...), nil
	case '-':
		return nil, fmt.Errorf("redis: %s", body)
	case '$':
		n, err := strconv.Atoi(string(body))
		if err != nil {
			return nil, fmt.Errorf("redis: bulk length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		if n > maxBulk {
			return nil, fmt.Errorf("redis: bulk of %d bytes", n)
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r.r, b); err != nil {
			return nil, err
		}
		return b[:n], nil
	}
	return nil, fmt.Errorf("redis: unexpected reply %q", line)
}

// do sends one command and reads its reply.
func (r *respConn) do(args ...[]byte) ([]byte, error) {
	r.write(args...)
	if err := r.w.Flush(); err != nil {
		return nil, err
	}
	return r.read()
}

// usedMemory returns used_memory from INFO memory.
func (r *respConn) usedMemory() (uint64, error) {
	b, err := r.do([]byte("INFO"), []byte("memory"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			return strconv.ParseUint(v, 10, 64)
		}
	}
	return 0, errors.New("redis: no used_memory in INFO memory")
}

// setPipelined SETs keys[i] to value, all queued before the replies are
// read.
func (r *respConn) setPipelined(keys [][]byte, value []byte) error {
	set := []byte("SET")
	for _, k := range keys {
		r.write(set, k, value)
	}
	if err := r.w.Flush(); err != nil {
		return err
	}
	for range keys {
		if _, err := r.read(); err != nil {
			return err
		}
	}
	return nil
}

// scanCount counts the keys matching pattern with SCAN ... COUNT count
// until the cursor returns to 0.
func (r *respConn) scanCount(pattern string, count int) (int, error) {
	n, cursor := 0, "0"
	for {
		r.write([]byte("SCAN"), []byte(cursor), []byte("MATCH"), []byte(pattern), []byte("COUNT"), []byte(strconv.Itoa(count)))
		if err := r.w.Flush(); err != nil {
			return n, err
		}
		// *2 [$cursor, *k [$key...]]
		if err := r.expectArray(2); err != nil {
			return n, err
		}
		c, err := r.read()
		if err != nil {
			return n, err
		}
		cursor = string(c)
		k, err := r.arrayLen()
		if err != nil {
			return n, err
		}
		for range k {
			if _, err := r.read(); err != nil {
				return n, err
			}
		}
		n += k
		if cursor == "0" {
			return n, nil
		}
	}
}

// arrayLen reads an array header and returns its length.
func (r *respConn) arrayLen() (int, error) {
	line, err := r.r.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 4 || line[0] != '*' {
		return 0, fmt.Errorf("redis: want an array, got %q", line)
	}
	n, err := strconv.Atoi(string(line[1 : len(line)-2]))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("redis: array length %q", line[1:len(line)-2])
	}
	return n, nil
}

func (r *respConn) expectArray(n int) error {
	k, err := r.arrayLen()
	if err == nil && k != n {
		err = fmt.Errorf("redis: array of %d, want %d", k, n)
	}
	return err
}
