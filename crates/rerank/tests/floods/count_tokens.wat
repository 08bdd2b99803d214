;; Host-call flood for host_calls.wat: count the tokens of an 8 MiB text ten times — about
;; 0.7 s of host CPU each, were it done. The calls follow one another with no loop between
;; them: no function entry or loop header where the epoch deadline would be checked, so only
;; the host can stop them. (Writing the text takes about a millisecond: the calls come well
;; inside the 5 ms deadline.)
(call $fill (i32.const 65536) (i32.const 0x800000))
(drop (call $count (i32.const 65536) (i32.const 0x800000)))
(drop (call $count (i32.const 65536) (i32.const 0x800000)))
(drop (call $count (i32.const 65536) (i32.const 0x800000)))
(drop (call $count (i32.const 65536) (i32.const 0x800000)))
(drop (call $count (i32.const 65536) (i32.const 0x800000)))
(drop (call $count (i32.const 65536) (i32.const 0x800000)))
(drop (call $count (i32.const 65536) (i32.const 0x800000)))
(drop (call $count (i32.const 65536) (i32.const 0x800000)))
(drop (call $count (i32.const 65536) (i32.const 0x800000)))
(drop (call $count (i32.const 65536) (i32.const 0x800000)))
