"""The byte layer: the one place that writes, checksums, maps, copies and bridges bytes.

Nothing here knows a file name, a dtype rule or a manifest (those are
gpart.formats'); everything above imports its bytes handling from here.

- `sink`: `ByteSink` (write, CRC-32, fsync), `preallocate`;
- `reader`: memory maps, preadv, page release (`release_pages`);
- `crc`: the CRC thread, `crc32_combine`, whole-file CRCs, `OnTheWayCrc`;
- `copy`: kernel copies of byte spans (`copy_spans`);
- `buffers`: `BufferRing`, `in_background`;
- `torch_bridge`: torch <-> numpy without copies (bfloat16 as raw uint16 bits).
"""
