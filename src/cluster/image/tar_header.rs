//! The few fields of a tar header an image archive is walked by: an entry's name (ustar, with
//! its prefix), its size (octal or GNU base-256) and the `path` and `size` of a PAX extended
//! header. Only where entries start and end is read; nothing is rewritten.

/// A tar block: every header, and the unit entries are padded to.
pub const BLOCK: usize = 512;

/// The `path` and `size` of PAX records (`<len> <key>=<value>\n`); None when malformed, or
/// when they describe a sparse file (`GNU.sparse.*`: its name and sizes are elsewhere, which
/// `docker save` never writes and neither reader follows).
pub fn pax_records(mut data: &[u8]) -> Option<(Option<String>, Option<u64>)> {
    let (mut path, mut size) = (None, None);
    while !data.is_empty() {
        let space = data.iter().position(|&b| b == b' ')?;
        let len: usize = std::str::from_utf8(&data[..space]).ok()?.parse().ok()?;
        if len <= space + 1 || len > data.len() {
            return None;
        }
        let record = data[space + 1..len].strip_suffix(b"\n")?;
        let eq = record.iter().position(|&b| b == b'=')?;
        let (key, value) = (&record[..eq], &record[eq + 1..]);
        match key {
            b"path" => path = Some(String::from_utf8_lossy(value).into_owned()),
            b"size" => size = Some(std::str::from_utf8(value).ok()?.parse().ok()?),
            k if k.starts_with(b"GNU.sparse.") => return None,
            _ => {}
        }
        data = &data[len..];
    }
    Some((path, size))
}

/// An entry's size: octal, or base-256 when the first byte's high bit is set (GNU).
fn header_size(header: &[u8; BLOCK]) -> Option<u64> {
    let field = &header[124..136];
    if field[0] & 0x80 != 0 {
        let mut value: u64 = u64::from(field[0] & 0x7f);
        for &b in &field[1..] {
            value = value.checked_mul(256)?.checked_add(u64::from(b))?;
        }
        return Some(value);
    }
    let text = std::str::from_utf8(field).ok()?;
    let digits = text.trim_matches(|c: char| c == '\0' || c == ' ');
    if digits.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(digits, 8).ok()
}

/// An entry's name: ustar's prefix and name.
fn header_name(header: &[u8; BLOCK]) -> String {
    let text = |field: &[u8]| {
        let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
        String::from_utf8_lossy(&field[..end]).into_owned()
    };
    let name = text(&header[..100]);
    // POSIX ustar has a prefix; GNU's "ustar  " keeps other fields there.
    if &header[257..263] == b"ustar\0" {
        let prefix = text(&header[345..500]);
        if !prefix.is_empty() {
            return format!("{prefix}/{name}");
        }
    }
    name
}

/// Where an entry's data stands.
pub struct Located {
    /// Its name: from an extended header before it, else its own.
    pub name: String,
    /// The bytes of its data (0 for a header-only kind, whatever the header says).
    pub size: u64,
    /// Those bytes padded to whole blocks: where the next header starts.
    pub padded: u64,
}

/// The entry of `header`, with what the extended headers before it said (`path`, `size`);
/// None when its size cannot be read, or is 2^63 or more, which Go's reader refuses.
pub fn locate(header: &[u8; BLOCK], path: Option<String>, size: Option<u64>) -> Option<Located> {
    let size = size
        .or_else(|| header_size(header))
        .filter(|&size| size < 1 << 63)?;
    let size = if header_only(header) { 0 } else { size };
    let padded = size.div_ceil(BLOCK as u64).checked_mul(BLOCK as u64)?;
    let name = path.unwrap_or_else(|| header_name(header));
    Some(Located { name, size, padded })
}

/// The name a GNU long-name entry (`L`) gives the next entry: its data up to the first NUL.
pub fn long_name(data: &[u8]) -> String {
    let name = data.split(|&b| b == 0).next().unwrap_or_default();
    String::from_utf8_lossy(name).into_owned()
}

/// True for a GNU long link name (`K`) or sparse file (`S`): Go's reader takes the next
/// entry's name or this entry's data from elsewhere than these readers look, and `docker save`
/// writes neither, so neither reader follows an archive past one.
pub fn not_followed(header: &[u8; BLOCK]) -> bool {
    matches!(header[156], b'K' | b'S')
}

/// True for the kinds of entry that hold no data whatever their size field says (links,
/// devices, directories, FIFOs), as Go's reader (and so `docker load`) takes them.
fn header_only(header: &[u8; BLOCK]) -> bool {
    matches!(header[156], b'1'..=b'6')
}

/// A tar entry as Go's archive/tar writes one: ustar header, data, padding.
#[cfg(test)]
pub fn entry(name: &str, kind: u8, data: &[u8]) -> Vec<u8> {
    let mut h = [0u8; BLOCK];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[100..107].copy_from_slice(b"0000644");
    h[124..135].copy_from_slice(format!("{:011o}", data.len()).as_bytes());
    h[156] = kind;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    let mut out = h.to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
    out
}

/// A PAX extended header of `records`.
#[cfg(test)]
pub fn pax(records: &[(&str, &str)]) -> Vec<u8> {
    let mut data = String::new();
    for (k, v) in records {
        // A record's length counts its own digits.
        let body = format!(" {k}={v}\n");
        let mut len = body.len() + 1;
        while len != body.len() + len.to_string().len() {
            len = body.len() + len.to_string().len();
        }
        data.push_str(&format!("{len}{body}"));
    }
    entry("PaxHeaders/x", b'x', data.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_octal_and_base_256() {
        let mut h = [0u8; BLOCK];
        h[124..135].copy_from_slice(b"00000001750");
        assert_eq!(header_size(&h), Some(1000));
        let mut h = [0u8; BLOCK];
        h[124] = 0x80;
        h[128..136].copy_from_slice(&(9u64 << 32).to_be_bytes());
        assert_eq!(header_size(&h), Some(9 << 32));
        let mut h = [0u8; BLOCK];
        h[124..127].copy_from_slice(b"9zz");
        assert_eq!(header_size(&h), None);
        assert_eq!(
            pax_records(b"20 path=a/layer.tar\n13 size=1024\n"),
            Some((Some("a/layer.tar".into()), Some(1024)))
        );
        assert_eq!(pax_records(b"5 x\n"), None);
    }
}
