;; Host-call flood for host_calls.wat: embed 64 texts of 8 KiB, then 8 texts of 8,000 bytes
;; (a batch within the byte budget) eight times, ignoring every error; the calls follow one
;; another with no loop between them, so that only the host can stop them.
(call $fill (i32.const 65536) (i32.const 8300))
(call $pairs (i32.const 64) (i32.const 8192))
(call $embed (i32.const 4096) (i32.const 64) (i32.const 2048))
(call $pairs (i32.const 8) (i32.const 8000))
(call $embed (i32.const 4096) (i32.const 8) (i32.const 2048))
(call $embed (i32.const 4096) (i32.const 8) (i32.const 2048))
(call $embed (i32.const 4096) (i32.const 8) (i32.const 2048))
(call $embed (i32.const 4096) (i32.const 8) (i32.const 2048))
(call $embed (i32.const 4096) (i32.const 8) (i32.const 2048))
(call $embed (i32.const 4096) (i32.const 8) (i32.const 2048))
(call $embed (i32.const 4096) (i32.const 8) (i32.const 2048))
(call $embed (i32.const 4096) (i32.const 8) (i32.const 2048))
