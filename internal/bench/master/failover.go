package master

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"
)

// failover stops the HA leader (SIGKILL, or SIGSTOP with FailoverStop),
// times the standby's election (until its /role says it leads: its master
// listens and its view is published), the nodes' remount on it (its
// /api/summary has every segment) and the wait, until
// cfg.RestoreTimeout after the signal, for every loaded object that
// existed before to exist again through the new leader; then checks that
// none absent before is back and restores two candidates: a new standby in
// place of a killed leader, or the stopped one resumed, which must step
// down to follower. A stopped leader is resumed on every path.
func (r *run) failover(ctx context.Context) error {
	c := r.c
	want, gone, err := c.existCount(ctx, allIndices(r.cfg.Objects))
	if err != nil {
		return fmt.Errorf("exist before the failover: %w", err)
	}
	old := c.leader()
	if old == nil {
		return errors.New("no serving leader to fail over")
	}
	oldRole, err := old.admin.role(ctx)
	if err != nil {
		return fmt.Errorf("leader /role: %w", err)
	}
	fr := &FailoverResult{Signal: r.cfg.FailoverSignal, Lease: r.cfg.HALease, Want: len(want), Deadline: r.cfg.RestoreTimeout,
		Removed: r.removed, OldView: oldRole.View}
	r.res.Failover = fr
	if len(want) == 0 {
		return errors.New("no loaded object left to fail over: nothing measured")
	}
	var standbys []*candidate
	for _, cd := range c.ha.cands {
		if cd != old {
			standbys = append(standbys, cd)
		}
	}
	resume := func() {
		if old.paused {
			_ = old.p.cmd.Process.Signal(syscall.SIGCONT)
			old.paused = false
		}
	}
	defer resume()

	c.nodeRemounts(0) // forget the lines of earlier remounts
	t0 := time.Now()
	deadline := t0.Add(r.cfg.RestoreTimeout)
	if r.cfg.FailoverSignal == FailoverStop {
		if err := old.p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			return fmt.Errorf("SIGSTOP the leader: %w", err)
		}
		old.paused = true
	} else {
		old.p.kill()
		c.ha.cands = slices.DeleteFunc(c.ha.cands, func(cd *candidate) bool { return cd == old })
	}
	if err := c.waitLeader(ctx, standbys, deadline); err != nil {
		return fmt.Errorf("election: %w within %v", err, r.cfg.RestoreTimeout)
	}
	fr.Election = time.Since(t0)
	if nr, err := c.admin.role(ctx); err == nil {
		fr.NewView = nr.View
	}
	if err := c.waitMounted(ctx, len(c.nodes), deadline); err != nil {
		return fmt.Errorf("nodes on the new leader: %w", err)
	}
	fr.Remount = time.Since(t0)
	missing, took, counted, firstErr := c.waitPresent(ctx, want, t0, deadline)
	fr.Took, fr.Counted, fr.FirstErr = took, counted, firstErr
	fr.NodeRemounts, fr.MasterRestore = c.nodeRemounts(remountLogWait), c.masterRestore()
	fr.Present, fr.Recovered = len(want)-len(missing), len(missing) == 0
	r.present = fr.Present
	if rss, err := vmRSS(c.master.pid()); err == nil {
		fr.RSSAfter = rss
	}
	if !fr.Recovered {
		for i, n := range c.nodes {
			fr.NodeLog = append(fr.NodeLog, fmt.Sprintf("node %d: %s", i, n.errTail.lastLine()))
		}
		return fmt.Errorf("%d of %d objects not back within %v of the %s (first error: %s; last node log lines: %s)", len(missing), len(want),
			r.cfg.RestoreTimeout, r.cfg.FailoverSignal, fr.FirstErr, strings.Join(fr.NodeLog, "; "))
	}
	back, _, err := c.existCount(ctx, gone)
	fr.RemovedBack, fr.RemovedTested = len(back), len(gone)
	if err != nil {
		return fmt.Errorf("exist of removed keys: %w", err)
	}
	if len(back) > 0 {
		return fmt.Errorf("%d removed objects back after the failover", len(back))
	}

	// Two candidates again for the phases after.
	if r.cfg.FailoverSignal == FailoverKill {
		if _, err := c.startCandidate(ctx); err != nil {
			return fmt.Errorf("new standby: %w", err)
		}
		fr.OldLeader = "replaced by a new standby"
		return nil
	}
	t1 := time.Now()
	resume()
	if err := waitRole(ctx, old, "follower", t1.Add(r.cfg.RestoreTimeout)); err != nil {
		fr.OldLeader = "resumed, " + err.Error()
		return fmt.Errorf("the resumed old leader: %w", err)
	}
	fr.StepDown = time.Since(t1)
	fr.OldLeader = "resumed, stepped down to follower"
	if nr, err := c.admin.role(ctx); err != nil || nr.Role != "leader" || nr.View != fr.NewView {
		return fmt.Errorf("the new leader after the old one resumed: %+v %v, want leader of view %d", nr, err, fr.NewView)
	}
	return nil
}

// waitMounted polls the serving master's /api/summary until it has
// nodes segments mounted, or deadline.
func (c *cluster) waitMounted(ctx context.Context, nodes int, deadline time.Time) error {
	tick := time.NewTicker(4 * haPoll)
	defer tick.Stop()
	last := ""
	for {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := c.admin.summary(sctx)
		cancel()
		if err == nil && s.Segments >= nodes {
			return nil
		}
		if last = fmt.Sprintf("%d segments", s.Segments); err != nil {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d segments not mounted by the deadline (last: %s)", nodes, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// waitRole polls cd's /role until it reports role or deadline.
func waitRole(ctx context.Context, cd *candidate, role string, deadline time.Time) error {
	tick := time.NewTicker(haPoll)
	defer tick.Stop()
	last := ""
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		r, err := cd.admin.role(rctx)
		cancel()
		if err == nil && r.Role == role {
			return nil
		}
		if last = r.Role; err != nil {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not %s by the deadline (last: %s)", role, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
