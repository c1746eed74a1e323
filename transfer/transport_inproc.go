package transfer

import (
	"context"
	"fmt"

	"github.com/kvcache-go/mooncake/internal/transport/inproc"
)

// inprocTransport copies straight between engines of this process that
// share Config.InprocHub. It claims every task.
// Hub is the directory through which engines of one process reach each
// other with Transport "inproc" (Config.InprocHub).
type Hub struct{ h *inproc.Hub }

// NewHub returns an empty hub.
func NewHub() *Hub { return &Hub{h: inproc.NewHub()} }

type inprocTransport struct{ hub *inproc.Hub }

func (*inprocTransport) name() string { return TransportInproc }

func (tr *inprocTransport) newPeer(seg *segment) peer {
	return &inprocPeer{hub: tr.hub, name: seg.name}
}

// inprocPeer finds the peer's memory in the hub at every transfer, so a
// peer engine that was closed fails the transfer (ErrPeerDown) and one
// reopened under the same name is found again.
type inprocPeer struct {
	hub  *inproc.Hub
	name string
}

func (p *inprocPeer) memory() (inproc.Memory, error) {
	mem, ok := p.hub.Lookup(p.name)
	if !ok {
		return nil, fmt.Errorf("transfer: %w: no in-process engine %q", ErrPeerDown, p.name)
	}
	return mem, nil
}

func (p *inprocPeer) prepare(context.Context) (bool, error) {
	_, err := p.memory()
	return true, err
}

func (p *inprocPeer) claim(context.Context, *task) job { return inprocJob{p} }

func (p *inprocPeer) close(error) {}

// inprocJob is one bounds-checked copy.
type inprocJob struct{ p *inprocPeer }

func (j inprocJob) slices() int { return 1 }
func (j inprocJob) async() bool { return false }
func (j inprocJob) abort(error) {}
func (j inprocJob) drop()       {}

func (j inprocJob) run(_ context.Context, b *Batch, t *task) {
	mem, err := j.p.memory()
	switch {
	case err != nil:
	case t.vec != nil:
		locals, remotes := make([][]byte, len(t.vec)), make([]uint64, len(t.vec))
		for i, x := range t.vec {
			locals[i], remotes[i] = x.b, x.remote
		}
		err = inproc.CopyV(mem, t.req.Op == OpWrite, locals, remotes)
	default:
		err = inproc.Copy(mem, t.req.Op == OpWrite, t.local.B, t.req.Remote)
	}
	b.sliceDone(t, err)
}
