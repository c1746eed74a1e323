package main

import (
	"os"
	"strconv"
	"strings"
)

// forceHCA is Mooncake's MC_FORCE_HCA: a protocol of the RDMA family must
// not fall back to TCP; without RDMA devices (always, here) opening fails.
func forceHCA() bool {
	v := strings.TrimSpace(os.Getenv("MC_FORCE_HCA"))
	if v == "" {
		return false
	}
	if b, err := strconv.ParseBool(v); err == nil {
		return b
	}
	return strings.EqualFold(v, "yes") || strings.EqualFold(v, "on")
}
