package bootstrap

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// RouteInfo is one prefill rank as SGLang's bootstrap server knows it: the
// body of PUT /route, and the answer of GET /route for that rank. For our
// engines RankIP:RankPort is the bootstrap address itself (the pull side
// channel is there).
type RouteInfo struct {
	AttnTPSize   int    `json:"attn_tp_size"`
	AttnTPRank   int    `json:"attn_tp_rank"`
	AttnDPSize   int    `json:"attn_dp_size"`
	AttnDPRank   int    `json:"attn_dp_rank"`
	PPSize       int    `json:"pp_size"`
	PPRank       int    `json:"pp_rank"`
	RankIP       string `json:"rank_ip"`
	RankPort     int    `json:"rank_port"`
	PageSize     int    `json:"page_size,omitempty"`
	KVCacheDType string `json:"kv_cache_dtype,omitempty"`
}

// ServerInfo is GET /route with every rank -1: the prefill server's shape,
// which decode checks (page size, KV dtype) before it transfers.
type ServerInfo struct {
	AttnTPSize   int    `json:"attn_tp_size"`
	AttnDPSize   int    `json:"attn_dp_size"`
	PPSize       int    `json:"pp_size"`
	PageSize     int    `json:"page_size"`
	KVCacheDType string `json:"kv_cache_dtype"`
}

// PutRoute registers a rank (SGLang's PUT /route). Sizes default to 1.
func (r *Registry) PutRoute(ri RouteInfo) error {
	for _, p := range []*int{&ri.AttnTPSize, &ri.AttnDPSize, &ri.PPSize} {
		if *p <= 0 {
			*p = 1
		}
	}
	switch {
	case ri.RankIP == "" || ri.RankPort <= 0 || ri.RankPort > 65535:
		return fmt.Errorf("%w: rank_ip and rank_port are required", ErrBadRequest)
	case ri.AttnTPRank < 0 || ri.AttnTPRank >= ri.AttnTPSize || ri.AttnDPRank < 0 || ri.AttnDPRank >= ri.AttnDPSize ||
		ri.PPRank < 0 || ri.PPRank >= ri.PPSize:
		return fmt.Errorf("%w: rank outside its size", ErrBadRequest)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.routes == nil {
		r.routes = map[[3]int]RouteInfo{}
	}
	r.routes[[3]int{ri.AttnDPRank, ri.AttnTPRank, ri.PPRank}] = ri
	return nil
}

// Route answers SGLang's GET /route: all ranks -1 give the server info;
// otherwise the rank. ok is false when nothing (or not that rank) is
// registered.
func (r *Registry) Route(dp, tp, pp int) (info any, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if dp == -1 && tp == -1 && pp == -1 {
		for _, ri := range r.routes {
			return ServerInfo{AttnTPSize: ri.AttnTPSize, AttnDPSize: ri.AttnDPSize, PPSize: ri.PPSize,
				PageSize: ri.PageSize, KVCacheDType: ri.KVCacheDType}, true
		}
		return nil, false
	}
	ri, ok := r.routes[[3]int{dp, tp, pp}]
	return ri, ok
}

func (s *Server) serveRoute(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPut:
		var ri RouteInfo
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBody)).Decode(&ri); err != nil {
			writeText(w, 400, "bad JSON: "+err.Error())
			return
		}
		if err := s.Registry.PutRoute(ri); err != nil {
			writeText(w, 400, err.Error())
			return
		}
		writeText(w, 200, "OK")
	case http.MethodGet:
		q := r.URL.Query()
		var ranks [3]int
		for i, k := range []string{"prefill_dp_rank", "target_tp_rank", "target_pp_rank"} {
			v := q.Get(k)
			if v == "" && k == "target_pp_rank" {
				v = "0" // older SGLang sends no pp rank
			}
			if v == "" && k == "prefill_dp_rank" {
				v = q.Get("target_dp_group") // older SGLang's name
			}
			if v == "" && k == "target_tp_rank" {
				v = q.Get("engine_rank")
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < -1 {
				writeText(w, 400, "missing or bad "+k)
				return
			}
			ranks[i] = n
		}
		info, ok := s.Registry.Route(ranks[0], ranks[1], ranks[2])
		if !ok {
			if all, _ := s.Registry.Route(-1, -1, -1); all == nil {
				writeText(w, 503, "prefill ranks not registered yet")
				return
			}
			writeText(w, 404, fmt.Sprintf("no prefill rank dp=%d tp=%d pp=%d", ranks[0], ranks[1], ranks[2]))
			return
		}
		b, _ := json.Marshal(info)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		w.Write(b)
	default:
		writeText(w, 405, "use GET or PUT")
	}
}

func writeText(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	w.Write([]byte(msg))
}

// Route asks addr's SGLang route (GET /route).
func (c *Client) Route(ctx context.Context, addr string, dp, tp, pp int, into any) error {
	u := "http://" + addr + "/route?" + url.Values{"prefill_dp_rank": {strconv.Itoa(dp)},
		"target_tp_rank": {strconv.Itoa(tp)}, "target_pp_rank": {strconv.Itoa(pp)}}.Encode()
	code, err := c.do(ctx, http.MethodGet, u, nil, into)
	if err != nil {
		return err
	}
	if code != 200 {
		return fmt.Errorf("bootstrap %s: route dp=%d tp=%d pp=%d: HTTP %d", addr, dp, tp, pp, code)
	}
	return nil
}
