package store

import (
	"context"
	"fmt"
)

// DeviceCopier is the GPU driver the client copies device buffers with
// (Config.Device; *cuda.Driver is one). The client never dereferences a
// device address itself.
type DeviceCopier interface {
	PointerInfo(p uintptr) (device bool, ordinal int, err error)
	CopyToHost(dev int, dst []byte, src uintptr) error
	CopyFromHost(dev int, dst uintptr, src []byte) error
}

// IsDevice reports whether addr is device memory (false without
// Config.Device).
func (c *Client) IsDevice(addr uintptr) bool {
	if c.cfg.Device == nil || addr == 0 {
		return false
	}
	d, _, err := c.cfg.Device.PointerInfo(addr)
	return err == nil && d
}

// deviceOrdinal checks that [addr, addr+n) starts in device memory.
func (c *Client) deviceOrdinal(what string, addr uintptr, n int) (int, error) {
	if c.cfg.Device == nil {
		return 0, fmt.Errorf("store: %s: %w: the client has no device driver (Config.Device)", what, ErrInvalid)
	}
	if addr == 0 || n <= 0 {
		return 0, fmt.Errorf("store: %s: %w: device buffer %#x+%d", what, ErrInvalid, addr, n)
	}
	d, ord, err := c.cfg.Device.PointerInfo(addr)
	if err != nil || !d {
		return 0, fmt.Errorf("store: %s: %w: %#x is not device memory (%v)", what, ErrInvalid, addr, err)
	}
	return ord, nil
}

// PutFromDevice stores n bytes of device memory at src under key. The
// value is copied to host memory with the driver first (the store
// checksums every value, and the host computes the CRC32C), then put like
// any value; it can be read into host or device memory.
func (c *Client) PutFromDevice(ctx context.Context, key string, src uintptr, n int, o PutOptions) error {
	ord, err := c.deviceOrdinal("put "+key, src, n)
	if err != nil {
		return err
	}
	host := make([]byte, n)
	if err := c.cfg.Device.CopyToHost(ord, host, src); err != nil {
		return fmt.Errorf("store: put %q: copy from the device: %w", key, err)
	}
	_, err = c.put(ctx, key, host, o, false)
	return err
}

// GetIntoDevice reads key's value into n bytes of device memory at dst and
// returns its length: the value is read and verified in host memory, then
// copied to the device. A value longer than n fails with ErrBufferTooSmall.
func (c *Client) GetIntoDevice(ctx context.Context, key string, dst uintptr, n int) (int, error) {
	ord, err := c.deviceOrdinal("get "+key, dst, n)
	if err != nil {
		return 0, err
	}
	v, err := c.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	return c.toDevice(key, ord, dst, n, v)
}

func (c *Client) toDevice(key string, ord int, dst uintptr, n int, v []byte) (int, error) {
	if len(v) > n {
		return 0, fmt.Errorf("store: get %q: value of %d bytes, device buffer of %d: %w", key, len(v), n, ErrBufferTooSmall)
	}
	if len(v) > 0 {
		if err := c.cfg.Device.CopyFromHost(ord, dst, v); err != nil {
			return 0, fmt.Errorf("store: get %q: copy to the device: %w", key, err)
		}
	}
	return len(v), nil
}

// BatchPutFromDevice is PutFromDevice for several keys through BatchPut:
// one error per key.
func (c *Client) BatchPutFromDevice(ctx context.Context, keys []string, srcs []uintptr, sizes []int, o PutOptions) []error {
	errs := make([]error, len(keys))
	if len(srcs) != len(keys) || len(sizes) != len(keys) {
		for i := range errs {
			errs[i] = fmt.Errorf("store: batch put: %w: %d keys, %d buffers, %d sizes", ErrInvalid, len(keys), len(srcs), len(sizes))
		}
		return errs
	}
	values := make([][]byte, len(keys))
	var okKeys []string
	var okVals [][]byte
	var okIdx []int
	for i := range keys {
		ord, err := c.deviceOrdinal("put "+keys[i], srcs[i], sizes[i])
		if err == nil {
			values[i] = make([]byte, sizes[i])
			err = c.cfg.Device.CopyToHost(ord, values[i], srcs[i])
		}
		if err != nil {
			errs[i] = err
			continue
		}
		okKeys, okVals, okIdx = append(okKeys, keys[i]), append(okVals, values[i]), append(okIdx, i)
	}
	if len(okKeys) > 0 {
		for j, err := range c.BatchPut(ctx, okKeys, okVals, o) {
			errs[okIdx[j]] = err
		}
	}
	return errs
}

// BatchGetIntoDevice is GetIntoDevice for several keys through BatchGet:
// lengths and one error per key.
func (c *Client) BatchGetIntoDevice(ctx context.Context, keys []string, dsts []uintptr, sizes []int) ([]int, []error) {
	got, errs := make([]int, len(keys)), make([]error, len(keys))
	if len(dsts) != len(keys) || len(sizes) != len(keys) {
		for i := range errs {
			errs[i] = fmt.Errorf("store: batch get: %w: %d keys, %d buffers, %d sizes", ErrInvalid, len(keys), len(dsts), len(sizes))
		}
		return got, errs
	}
	ords := make([]int, len(keys))
	for i := range keys {
		ords[i], errs[i] = c.deviceOrdinal("get "+keys[i], dsts[i], sizes[i])
	}
	vals, gerrs := c.BatchGet(ctx, keys)
	for i := range keys {
		if errs[i] != nil {
			continue
		}
		if gerrs[i] != nil {
			errs[i] = gerrs[i]
			continue
		}
		got[i], errs[i] = c.toDevice(keys[i], ords[i], dsts[i], sizes[i], vals[i])
	}
	return got, errs
}
