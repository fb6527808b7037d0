/*
 * oslo_backend_slots.h - part of oslo_backend.h (include that one): the
 * sizes of the table's versions, and the slot of every entry of
 * oslo_backend_iface, pinned by static asserts, so that
 * moving, removing or inserting an entry (which breaks every plugin built
 * before) fails to compile. A new entry gets its size macro and its
 * OSLO_BK_SLOT_ line here.
 */
#ifndef OSLO_BACKEND_SLOTS_H
#define OSLO_BACKEND_SLOTS_H

#ifndef OSLO_BACKEND_H
#error "include oslo_backend.h, not oslo_backend_slots.h"
#endif

/** The size of an ABI v1 table: every entry up to comm_abort. */
#define OSLO_BACKEND_IFACE_V1_SIZE (offsetof(oslo_backend_iface, copy_async))
/** The size of an ABI v2 table. */
#define OSLO_BACKEND_IFACE_V2_SIZE (offsetof(oslo_backend_iface, adamw) + sizeof(void (*)(void)))
/** The size of a v2 table with the optional recorded-work entries
 * (graph_begin, graph_end), appended after v2's required size. */
#define OSLO_BACKEND_IFACE_V2_GRAPHS_SIZE \
  (offsetof(oslo_backend_iface, graph_end) + sizeof(void (*)(void)))

/** The size of a v2 table with the graph entries and the prepacked-weight
 * entries (pack_weight, matmul_packed, packed_free). */
#define OSLO_BACKEND_IFACE_V2_PACKED_SIZE \
  (offsetof(oslo_backend_iface, packed_free) + sizeof(void (*)(void)))

/** The size of a v2 table with the staging entries (check_memory,
 * host_alloc, host_free) after the prepacked-weight ones. */
#define OSLO_BACKEND_IFACE_V2_STAGING_SIZE \
  (offsetof(oslo_backend_iface, host_free) + sizeof(void (*)(void)))

/** The size of a v2 table with the training entry (attention_backward)
 * after the staging ones. */
#define OSLO_BACKEND_IFACE_V2_TRAIN_SIZE \
  (offsetof(oslo_backend_iface, attention_backward) + sizeof(void (*)(void)))

/** The size of a v2 table with the serving entry (paged_attention) after
 * the training one. */
#define OSLO_BACKEND_IFACE_V2_SERVE_SIZE \
  (offsetof(oslo_backend_iface, paged_attention) + sizeof(void (*)(void)))

/** The size of a v2 table with the quantized-weight entries (dequantize,
 * matmul_quant) after the serving one. */
#define OSLO_BACKEND_IFACE_V2_QUANT_SIZE \
  (offsetof(oslo_backend_iface, matmul_quant) + sizeof(void (*)(void)))

/** The size of a v2 table with the int8 KV cache's entries (quantize_rows,
 * dequantize_rows) after the quantized-weight ones. */
#define OSLO_BACKEND_IFACE_V2_KV8_SIZE \
  (offsetof(oslo_backend_iface, dequantize_rows) + sizeof(void (*)(void)))

/** The size of a v2 table with the int8 KV cache's attention (attention_kv8)
 * after its row entries. */
#define OSLO_BACKEND_IFACE_V2_KV8_ATTENTION_SIZE \
  (offsetof(oslo_backend_iface, attention_kv8) + sizeof(void (*)(void)))

/** The size of a v2 table with unpack_weight (packed copies that hold the
 * whole weight) after attention_kv8. */
#define OSLO_BACKEND_IFACE_V2_UNPACK_SIZE \
  (offsetof(oslo_backend_iface, unpack_weight) + sizeof(void (*)(void)))

/** The size of a v2 table with paged_attention_kv8 (serving over an int8
 * paged cache) after unpack_weight. */
#define OSLO_BACKEND_IFACE_V2_PAGED_KV8_SIZE \
  (offsetof(oslo_backend_iface, paged_attention_kv8) + sizeof(void (*)(void)))

/* The slot of every entry, pinned: entry i (create is 0) lies at
 * offsetof(create) + i pointers. Moving, removing or inserting an entry
 * breaks every plugin built before; these make it a compile error. */
#if defined(__cplusplus) && __cplusplus >= 201103L
#define OSLO_BK_STATIC_ASSERT_(cond, msg) static_assert(cond, msg)
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define OSLO_BK_STATIC_ASSERT_(cond, msg) _Static_assert(cond, msg)
#endif
#ifdef OSLO_BK_STATIC_ASSERT_
#define OSLO_BK_SLOT_(entry, i)                                                                   \
  OSLO_BK_STATIC_ASSERT_(offsetof(oslo_backend_iface, entry) ==                                   \
                             offsetof(oslo_backend_iface, create) + (i) * sizeof(void (*)(void)), \
                         "backend ABI: slot of " #entry " moved")
OSLO_BK_STATIC_ASSERT_(offsetof(oslo_backend_iface, struct_size) == 0,
                       "backend ABI: struct_size moved");
OSLO_BK_STATIC_ASSERT_(offsetof(oslo_backend_iface, name) == 2 * sizeof(size_t) ||
                           offsetof(oslo_backend_iface, name) == sizeof(size_t) + sizeof(uint32_t),
                       "backend ABI: name moved");
OSLO_BK_STATIC_ASSERT_(offsetof(oslo_backend_iface, create) ==
                           offsetof(oslo_backend_iface, name) + sizeof(const char *),
                       "backend ABI: create moved");
OSLO_BK_SLOT_(create, 0);
OSLO_BK_SLOT_(destroy, 1);
OSLO_BK_SLOT_(last_error, 2);
OSLO_BK_SLOT_(device_type, 3);
OSLO_BK_SLOT_(device_id, 4);
OSLO_BK_SLOT_(host_accessible, 5);
OSLO_BK_SLOT_(alloc, 6);
OSLO_BK_SLOT_(free, 7);
OSLO_BK_SLOT_(copy, 8);
OSLO_BK_SLOT_(synchronize, 9);
OSLO_BK_SLOT_(set_num_threads, 10);
OSLO_BK_SLOT_(convert, 11);
OSLO_BK_SLOT_(fill, 12);
OSLO_BK_SLOT_(matmul, 13);
OSLO_BK_SLOT_(binary, 14);
OSLO_BK_SLOT_(unary, 15);
OSLO_BK_SLOT_(unary_backward, 16);
OSLO_BK_SLOT_(reduce, 17);
OSLO_BK_SLOT_(sum_rows, 18);
OSLO_BK_SLOT_(softmax, 19);
OSLO_BK_SLOT_(softmax_backward, 20);
OSLO_BK_SLOT_(norm, 21);
OSLO_BK_SLOT_(gather_rows, 22);
OSLO_BK_SLOT_(scatter_add_rows, 23);
OSLO_BK_SLOT_(gather_cols, 24);
OSLO_BK_SLOT_(scatter_add_cols, 25);
OSLO_BK_SLOT_(comm_create, 26);
OSLO_BK_SLOT_(comm_destroy, 27);
OSLO_BK_SLOT_(comm_name, 28);
OSLO_BK_SLOT_(comm_last_error, 29);
OSLO_BK_SLOT_(comm_all_reduce, 30);
OSLO_BK_SLOT_(comm_all_gather, 31);
OSLO_BK_SLOT_(comm_reduce_scatter, 32);
OSLO_BK_SLOT_(comm_broadcast, 33);
OSLO_BK_SLOT_(comm_send, 34);
OSLO_BK_SLOT_(comm_recv, 35);
OSLO_BK_SLOT_(comm_barrier, 36);
OSLO_BK_SLOT_(comm_abort, 37);
/* ABI v2 */
OSLO_BK_SLOT_(copy_async, 38);
OSLO_BK_SLOT_(event_create, 39);
OSLO_BK_SLOT_(event_destroy, 40);
OSLO_BK_SLOT_(event_record, 41);
OSLO_BK_SLOT_(event_wait, 42);
OSLO_BK_SLOT_(event_synchronize, 43);
OSLO_BK_SLOT_(alloc_async, 44);
OSLO_BK_SLOT_(free_async, 45);
OSLO_BK_SLOT_(device_name, 46);
OSLO_BK_SLOT_(memory_info, 47);
OSLO_BK_SLOT_(op_supported, 48);
OSLO_BK_SLOT_(native_stream, 49);
OSLO_BK_SLOT_(stream_wait_event, 50);
OSLO_BK_SLOT_(attention, 51);
OSLO_BK_SLOT_(residual_norm, 52);
OSLO_BK_SLOT_(rope, 53);
OSLO_BK_SLOT_(matmul_act, 54);
OSLO_BK_SLOT_(argmax, 55);
OSLO_BK_SLOT_(norm_backward, 56);
OSLO_BK_SLOT_(adamw, 57);
OSLO_BK_SLOT_(graph_begin, 58);
OSLO_BK_SLOT_(graph_end, 59);
OSLO_BK_SLOT_(pack_weight, 60);
OSLO_BK_SLOT_(matmul_packed, 61);
OSLO_BK_SLOT_(packed_free, 62);
OSLO_BK_SLOT_(check_memory, 63);
OSLO_BK_SLOT_(host_alloc, 64);
OSLO_BK_SLOT_(host_free, 65);
OSLO_BK_SLOT_(attention_backward, 66);
OSLO_BK_SLOT_(paged_attention, 67);
OSLO_BK_SLOT_(dequantize, 68);
OSLO_BK_SLOT_(matmul_quant, 69);
OSLO_BK_SLOT_(quantize_rows, 70);
OSLO_BK_SLOT_(dequantize_rows, 71);
OSLO_BK_SLOT_(attention_kv8, 72);
OSLO_BK_SLOT_(unpack_weight, 73);
OSLO_BK_SLOT_(paged_attention_kv8, 74);
OSLO_BK_STATIC_ASSERT_(OSLO_BACKEND_IFACE_V1_SIZE ==
                           offsetof(oslo_backend_iface, create) + 38 * sizeof(void (*)(void)),
                       "backend ABI: the v1 table has 38 entries");
OSLO_BK_STATIC_ASSERT_(OSLO_BACKEND_IFACE_V2_PAGED_KV8_SIZE == sizeof(oslo_backend_iface),
                       "backend ABI: an entry after paged_attention_kv8 needs its own size macro");
#undef OSLO_BK_SLOT_
#endif

#endif /* OSLO_BACKEND_SLOTS_H */
