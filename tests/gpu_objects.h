/* Lists the CUDA code objects inside a host binary without NVIDIA's cuobjdump (which CI's CUDA
 * install lacks): an ELF64 section lookup, then a walk of the fat binaries in .nv_fatbin. */
#ifndef PL_TESTS_GPU_OBJECTS_H
#define PL_TESTS_GPU_OBJECTS_H

#include "common/status.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define GO_FATBIN_MAGIC 0xBA55ED50u
#define GO_KIND_PTX 1
#define GO_KIND_ELF 2
#define GO_EM_CUDA 190
#define GO_ENTRY_MIN 64                 /* bytes of an entry header this walk reads */
#define GO_FLAG_COMPRESSED 0xA000u      /* lz4 (0x2000) or zstd (0x8000) payload */

/* One image of a fat binary. elf_sm is the sm read from the cubin's own ELF header (-1 for PTX
 * and compressed images), so the fat binary's label can be checked against the code. */
typedef struct {
    int fatbin; /* index of the fat binary holding it, in section order */
    int kind;   /* GO_KIND_PTX, GO_KIND_ELF or another kind as stored */
    int arch;   /* sm the fat binary says the image is for */
    int elf_sm;
    uint64_t flags;
} go_image_t;

static inline uint16_t go_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t go_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t go_u64(const uint8_t *p)
{
    return (uint64_t)go_u32(p) | (uint64_t)go_u32(p + 4) << 32;
}

/* Find section `name` of a little-endian ELF64 image: its offset and size inside img. */
static inline pl_status_t go_elf_section(const uint8_t *img, size_t len, const char *name,
                                         size_t *off_p, size_t *size_p)
{
    if (len < 64 || memcmp(img, "\177ELF", 4) != 0)
        return pl_error(PL_ERR_INVALID, "elf: no ELF header");
    if (img[4] != 2 || img[5] != 1)
        return pl_error(PL_ERR_UNSUPPORTED, "elf: class %d data %d, not ELF64 little-endian",
                        img[4], img[5]);
    uint64_t shoff = go_u64(img + 0x28);
    unsigned shentsize = go_u16(img + 0x3a), shnum = go_u16(img + 0x3c);
    unsigned shstrndx = go_u16(img + 0x3e);
    if (shentsize != 64)
        return pl_error(PL_ERR_INVALID, "elf: e_shentsize %u, not 64", shentsize);
    if (shoff > len || (uint64_t)shnum * 64 > len - shoff)
        return pl_error(PL_ERR_INVALID, "elf: %u section headers at %llu past the end (%zu)",
                        shnum, (unsigned long long)shoff, len);
    if (shstrndx >= shnum)
        return pl_error(PL_ERR_INVALID, "elf: e_shstrndx %u of %u sections", shstrndx, shnum);
    const uint8_t *str = img + shoff + (size_t)shstrndx * 64;
    uint64_t str_off = go_u64(str + 0x18), str_size = go_u64(str + 0x20);
    if (str_off > len || str_size > len - str_off)
        return pl_error(PL_ERR_INVALID, "elf: section names past the end");
    size_t want = strlen(name);
    for (unsigned i = 0; i < shnum; i++) {
        const uint8_t *sh = img + shoff + (size_t)i * 64;
        uint32_t nm = go_u32(sh);
        if (nm >= str_size || str_size - nm <= want)
            continue; /* no room for name and its NUL */
        const char *s = (const char *)img + str_off + nm;
        if (memcmp(s, name, want + 1) != 0)
            continue;
        uint32_t type = go_u32(sh + 4);
        uint64_t off = go_u64(sh + 0x18), size = go_u64(sh + 0x20);
        if (type == 8) /* SHT_NOBITS: no bytes in the file */
            return pl_error(PL_ERR_INVALID, "elf: section %s has no contents", name);
        if (off > len || size > len - off)
            return pl_error(PL_ERR_INVALID, "elf: section %s (%llu bytes at %llu) past the end",
                            name, (unsigned long long)size, (unsigned long long)off);
        *off_p = (size_t)off;
        *size_p = (size_t)size;
        return PL_OK;
    }
    return pl_error(PL_ERR_NOT_FOUND, "elf: no section %s", name);
}

/* The sm of a cubin from its ELF header (e_flags: bits 8..15 from ELF ABI version 8, CUDA 12.8
 * and later; bits 0..7 before), or -1 when the bytes are not a CUDA ELF. */
static inline int go_cubin_sm(const uint8_t *p, size_t len)
{
    if (len < 52 || memcmp(p, "\177ELF", 4) != 0 || go_u16(p + 0x12) != GO_EM_CUDA)
        return -1;
    uint32_t flags = go_u32(p + (p[4] == 2 ? 0x30 : 0x24));
    return p[8] >= 8 ? (int)((flags >> 8) & 0xff) : (int)(flags & 0xff);
}

/* Walk the fat binaries laid end to end (8-byte aligned) in sec: images[0..max) get the first
 * max images, *n_p the count of all. Fails, naming the offset, on any header that does not fit. */
static inline pl_status_t go_fatbin_list(const uint8_t *sec, size_t len, go_image_t *images,
                                         int max, int *n_p)
{
    size_t off = 0;
    int n = 0, fb = 0;
    while (off < len) {
        if (len - off < 16) {
            for (size_t i = off; i < len; i++)
                if (sec[i])
                    return pl_error(PL_ERR_INVALID, "fatbin: %zu stray bytes at %zu", len - off,
                                    off);
            break;
        }
        uint32_t magic = go_u32(sec + off);
        unsigned version = go_u16(sec + off + 4), hs = go_u16(sec + off + 6);
        uint64_t size = go_u64(sec + off + 8);
        if (magic != GO_FATBIN_MAGIC)
            return pl_error(PL_ERR_INVALID, "fatbin %d at %zu: magic 0x%08x", fb, off, magic);
        if (version != 1 || hs < 16 || hs > len - off)
            return pl_error(PL_ERR_INVALID, "fatbin %d at %zu: version %u, header size %u", fb,
                            off, version, hs);
        if (size > len - off - hs)
            return pl_error(PL_ERR_INVALID, "fatbin %d at %zu: %llu bytes past the end", fb, off,
                            (unsigned long long)size);
        size_t e = off + hs, end = off + hs + (size_t)size;
        while (e < end) {
            if (end - e < GO_ENTRY_MIN)
                return pl_error(PL_ERR_INVALID, "fatbin %d: entry at %zu truncated", fb, e);
            const uint8_t *h = sec + e;
            uint32_t ehs = go_u32(h + 4);
            uint64_t esize = go_u64(h + 8);
            if (ehs < GO_ENTRY_MIN || ehs > end - e || esize > end - e - ehs)
                return pl_error(PL_ERR_INVALID,
                                "fatbin %d: entry at %zu: header %u, size %llu past the end", fb,
                                e, ehs, (unsigned long long)esize);
            go_image_t im = {.fatbin = fb,
                             .kind = go_u16(h),
                             .arch = (int)go_u32(h + 28),
                             .elf_sm = -1,
                             .flags = go_u64(h + 40)};
            if (im.kind == GO_KIND_ELF && !(im.flags & GO_FLAG_COMPRESSED))
                im.elf_sm = go_cubin_sm(h + ehs, (size_t)esize);
            if (n < max)
                images[n] = im;
            n++;
            e += ehs + (size_t)esize;
        }
        fb++;
        off = end + (8 - end % 8) % 8;
    }
    *n_p = n;
    return PL_OK;
}

#endif
