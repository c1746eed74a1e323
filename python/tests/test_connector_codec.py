import unittest

import numpy as np

from mooncake.connector import decode_array, decode_str, encode_array, encode_str, parse_url


class CodecTest(unittest.TestCase):
    def test_array_round_trip(self):
        arrays = [
            np.arange(24, dtype=np.float32).reshape(2, 3, 4),
            np.array([1, -2, 3], dtype=">i8"),
            np.zeros((0, 5), dtype=np.float16),
            np.array(3.5),
            np.array([True, False]),
            np.arange(10, dtype=np.uint8)[::2],  # not contiguous
            np.array([(1, 2.0)], dtype=[("a", "<i4"), ("b", "<f8")]),
            np.array([1 + 2j], dtype=np.complex64),
        ]
        for a in arrays:
            with self.subTest(dtype=str(a.dtype), shape=a.shape):
                b = decode_array(encode_array(a))
                self.assertEqual(b.dtype, a.dtype)
                self.assertEqual(b.shape, a.shape)
                np.testing.assert_array_equal(a, b)

    def test_object_arrays_refused(self):
        with self.assertRaises(ValueError):
            encode_array(np.array([object()]))

    def test_str_round_trip(self):
        for s in ["", "hello", "π ≈ 3.14159", "x" * 100000]:
            self.assertEqual(decode_str(encode_str(s)), s)

    def test_corrupt(self):
        good = encode_array(np.arange(4, dtype=np.int32))
        for bad in [b"", b"MCNP", b"XXXX" + good[4:], good[:-1], good + b"x",
                    b"MCNP\xff\xff\xff\xff" + good[8:], encode_str("a")]:
            with self.subTest(bad=bad[:12]):
                with self.assertRaises(ValueError):
                    decode_array(bad)
        with self.assertRaises(ValueError):
            decode_str(good)

    def test_parse_url(self):
        self.assertEqual(parse_url("mooncake://127.0.0.1:50051"), "127.0.0.1:50051")
        self.assertEqual(parse_url("mooncake://127.0.0.1:7000/models/x"), "127.0.0.1:7000")
        self.assertEqual(parse_url("mooncake://127.0.0.1"), "127.0.0.1:50051")
        for bad in ["redis://a:1", "mooncake://", "mooncake://:1", "mooncake://h:99999", "mooncake://h:x", None]:
            with self.subTest(url=bad):
                with self.assertRaises(ValueError):
                    parse_url(bad)


if __name__ == "__main__":
    unittest.main()
