package election

import "testing"

func TestAdvertise(t *testing.T) {
	for _, tc := range []struct{ host, addr, want string }{
		{"", "127.0.0.1:5", "127.0.0.1:5"},
		{"", "[::]:5", "127.0.0.1:5"},
		{"", "0.0.0.0:5", "127.0.0.1:5"},
		{"10.0.0.2", "[::]:5", "10.0.0.2:5"},
	} {
		if got := advertise(tc.host, tc.addr); got != tc.want {
			t.Errorf("advertise(%q, %q) = %q, want %q", tc.host, tc.addr, got, tc.want)
		}
	}
}
