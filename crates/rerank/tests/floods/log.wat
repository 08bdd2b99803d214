;; Host-call flood for host_calls.wat: 100,000 log lines of 1 KiB at error level.
(call $fill (i32.const 65536) (i32.const 1024))
(local.set $k (i32.const 100000))
(loop $again
  (call $log (i32.const 3) (i32.const 65536) (i32.const 1024))
  (local.set $k (i32.sub (local.get $k) (i32.const 1)))
  (br_if $again (local.get $k)))
