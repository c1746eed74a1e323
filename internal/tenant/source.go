package tenant

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Loader reads the current policy's bytes; it must return by ctx's
// deadline.
type Loader func(ctx context.Context) ([]byte, error)

// FileLoader reads the policy file at path.
func FileLoader(path string) Loader {
	return func(ctx context.Context) ([]byte, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		var b bytes.Buffer
		if _, err := b.ReadFrom(&limitedReader{f: f, n: MaxPolicy + 1}); err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		return b.Bytes(), nil
	}
}

type limitedReader struct {
	f *os.File
	n int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, fmt.Errorf("policy longer than %d bytes", MaxPolicy)
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.f.Read(p)
	l.n -= int64(n)
	return n, err
}

// SourceConfig configures a Source.
type SourceConfig struct {
	Load        Loader
	Interval    time.Duration           // Run's polling period (default 1s)
	ReadTimeout time.Duration           // deadline of one Load (default 5s)
	OnError     func(err error)         // a reload that failed (the current Set stays); nil: ignored
	OnChange    func(s *Set, gen int64) // a new Set is in force; nil: ignored
	// Save writes a changed policy where Load reads it (Edit); nil: the
	// policy is changed only where it is kept, by others.
	Save Saver
}

// Source is the policy in force, replaced whole when the loader's bytes
// change. The zero value is not usable: NewSource.
type Source struct {
	cfg  SourceConfig
	cur  atomic.Pointer[Set]
	gen  atomic.Int64
	mu   sync.Mutex // serialises reloads
	last []byte     // the bytes of the Set in force
}

// NewSource loads the policy once; it fails when the first load fails.
func NewSource(ctx context.Context, cfg SourceConfig) (*Source, error) {
	if cfg.Load == nil {
		return nil, fmt.Errorf("%w: no loader", ErrPolicy)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = 5 * time.Second
	}
	s := &Source{cfg: cfg}
	if _, err := s.Reload(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Static is a Source that always holds set (tests, embedders).
func Static(set *Set) *Source {
	s := &Source{}
	s.cur.Store(set)
	s.gen.Store(1)
	return s
}

// Set is the policy in force.
func (s *Source) Set() *Set { return s.cur.Load() }

// Generation counts the Sets that came into force (1 for the first).
func (s *Source) Generation() int64 { return s.gen.Load() }

// Reload reads the policy now and puts it in force when its bytes changed;
// it reports whether they did. On an error the current Set stays.
func (s *Source) Reload(ctx context.Context) (bool, error) {
	if s.cfg.Load == nil {
		return false, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadTimeout)
	defer cancel()
	b, err := s.load(ctx)
	if err != nil {
		return false, err
	}
	if s.cur.Load() != nil && bytes.Equal(b, s.last) {
		return false, nil
	}
	set, err := Parse(b)
	if err != nil {
		return false, fmt.Errorf("tenant: %w", err)
	}
	s.install(b, set)
	return true, nil
}

// load reads the policy's bytes (s.mu held).
func (s *Source) load(ctx context.Context) ([]byte, error) {
	b, err := s.cfg.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("tenant: load policy: %w", err)
	}
	return b, nil
}

// install puts set, parsed from b, in force (s.mu held).
func (s *Source) install(b []byte, set *Set) {
	s.last = b
	s.cur.Store(set)
	g := s.gen.Add(1)
	if s.cfg.OnChange != nil {
		s.cfg.OnChange(set, g)
	}
}

// Edit changes the policy where it is kept: it reads it afresh, applies
// change (SetQuota, RemoveTenant), saves the result and puts it in force,
// all under the lock of reloads (so two edits never lose one another). It
// returns the Set now in force; ErrReadOnly without a Saver.
func (s *Source) Edit(ctx context.Context, change func(policy []byte) ([]byte, error)) (*Set, error) {
	if s.cfg.Save == nil || s.cfg.Load == nil {
		return nil, ErrReadOnly
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadTimeout)
	defer cancel()
	b, err := s.load(ctx)
	if err != nil {
		return nil, err
	}
	nb, err := change(b)
	if err != nil {
		return nil, err
	}
	set, err := Parse(nb)
	if err != nil {
		return nil, fmt.Errorf("tenant: %w", err)
	}
	if err := s.cfg.Save(ctx, nb); err != nil {
		return nil, fmt.Errorf("tenant: save policy: %w", err)
	}
	s.install(nb, set)
	return set, nil
}

// Run reloads every Interval until ctx ends (errors go to OnError) and
// returns nil then.
func (s *Source) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if _, err := s.Reload(ctx); err != nil && s.cfg.OnError != nil && ctx.Err() == nil {
				s.cfg.OnError(err)
			}
		}
	}
}
