//! The data path's bytes for a row of a Parquet table: each cell's value in binary, typed by the
//! table's Arrow schema, so rows travel through the spill shards and the sorted runs as opaque
//! bytes (as a CSV row travels as its line) and come back as Arrow arrays with no text between.
//!
//! A row is a null bitmap (bit `c % 8` of byte `c / 8` set when column `c` is null), then each
//! non-null cell in column order:
//!
//! | column type | cell bytes |
//! |---|---|
//! | fixed-width (integers, floats, decimals, dates, times, timestamps) | the value's native little-endian bytes |
//! | Boolean | one byte, 0 or 1 |
//! | FixedSizeBinary(w) | the `w` bytes |
//! | Utf8, LargeUtf8, Utf8View, Binary, LargeBinary, BinaryView | LEB128 length, then the bytes |
//! | Null | nothing (always null) |
//!
//! A dictionary column is carried as its values and packed into a dictionary again on output.
//! Decoding checks every length against the row and every string's UTF-8 (Arrow validates the
//! arrays it is given), so a damaged row is an error, never a panic or a wrong value.

use crate::error::DataError;
use arrow_array::cast::AsArray;
use arrow_array::{
    Array, ArrayRef, BooleanArray, FixedSizeBinaryArray, GenericBinaryArray, GenericStringArray,
    NullArray, make_array,
};
use arrow_buffer::{BooleanBufferBuilder, Buffer, NullBufferBuilder, OffsetBuffer};
use arrow_data::ArrayData;
use arrow_schema::{ArrowError, DataType, Schema};
use blindjoin_link::{read_varint_u64, varint_bytes};
use std::path::Path;
use std::sync::Arc;

/// How a column's cells are laid out in a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cell {
    Null,
    Fixed(usize),
    Bool,
    FixedBinary(usize),
    /// Length-prefixed bytes; `text` when they must be UTF-8.
    Var {
        text: bool,
    },
}

/// The value type a column is carried as (a dictionary's values), and its cell layout.
fn cell_of(data_type: &DataType) -> Option<Cell> {
    use DataType as T;
    Some(match data_type {
        T::Null => Cell::Null,
        T::Boolean => Cell::Bool,
        T::FixedSizeBinary(w) => Cell::FixedBinary(usize::try_from(*w).ok()?),
        T::Utf8 | T::LargeUtf8 | T::Utf8View => Cell::Var { text: true },
        T::Binary | T::LargeBinary | T::BinaryView => Cell::Var { text: false },
        T::Dictionary(_, value) => cell_of(value)?,
        other => Cell::Fixed(other.primitive_width()?),
    })
}

/// Each column's cell layout, or [`DataError::UnsupportedParquetType`] naming the first column
/// of the table at `path` that cannot be carried.
fn cells(path: &Path, schema: &Schema) -> Result<Vec<Cell>, DataError> {
    schema
        .fields()
        .iter()
        .map(|f| {
            cell_of(f.data_type()).ok_or_else(|| DataError::UnsupportedParquetType {
                path: path.to_path_buf(),
                column: f.name().clone(),
                data_type: f.data_type().to_string(),
            })
        })
        .collect()
}

/// The type a column's cells decode to before any dictionary packing.
fn carried_type(data_type: &DataType) -> &DataType {
    match data_type {
        DataType::Dictionary(_, value) => value,
        other => other,
    }
}

/// Encodes rows of record batches of one schema.
pub(crate) struct RowEncoder {
    cells: Vec<Cell>,
}

/// One column of a batch, ready to encode cells from.
enum Source<'a> {
    Null,
    Fixed {
        values: &'a [u8],
        width: usize,
        array: &'a ArrayRef,
    },
    Bool(&'a BooleanArray),
    FixedBinary(&'a FixedSizeBinaryArray),
    Var(Box<dyn Fn(usize) -> &'a [u8] + 'a>, &'a ArrayRef),
}

impl RowEncoder {
    /// An encoder for the schema of the table at `path`.
    ///
    /// # Errors
    /// A column type that cannot be carried.
    pub(crate) fn new(path: &Path, schema: &Schema) -> Result<RowEncoder, DataError> {
        Ok(RowEncoder {
            cells: cells(path, schema)?,
        })
    }

    /// The bytes of a row whose every cell is null (the padding rows of outer joins).
    pub(crate) fn null_row(&self) -> Vec<u8> {
        let mut row = vec![0u8; self.cells.len().div_ceil(8)];
        for c in 0..self.cells.len() {
            row[c / 8] |= 1 << (c % 8);
        }
        row
    }

    /// Appends the bytes of every row of `columns` (a batch of the encoder's schema, with
    /// dictionaries already cast to their values) to `out`, each row's end to `ends`.
    pub(crate) fn encode(
        &self,
        columns: &[ArrayRef],
        rows: usize,
        out: &mut Vec<u8>,
        ends: &mut Vec<usize>,
    ) -> Result<(), ArrowError> {
        let sources = columns
            .iter()
            .zip(&self.cells)
            .map(|(a, &cell)| source(a, cell))
            .collect::<Result<Vec<_>, _>>()?;
        let map_bytes = self.cells.len().div_ceil(8);
        for i in 0..rows {
            let map_at = out.len();
            out.resize(map_at + map_bytes, 0);
            for (c, s) in sources.iter().enumerate() {
                let null = match s {
                    Source::Null => true,
                    Source::Fixed { array, .. } | Source::Var(_, array) => array.is_null(i),
                    Source::Bool(a) => a.is_null(i),
                    Source::FixedBinary(a) => a.is_null(i),
                };
                if null {
                    out[map_at + c / 8] |= 1 << (c % 8);
                    continue;
                }
                match s {
                    Source::Null => {}
                    Source::Fixed { values, width, .. } => {
                        out.extend_from_slice(&values[i * width..(i + 1) * width]);
                    }
                    Source::Bool(a) => out.push(u8::from(a.value(i))),
                    Source::FixedBinary(a) => out.extend_from_slice(a.value(i)),
                    Source::Var(value, _) => {
                        let v = value(i);
                        let (len, n) = varint_bytes(v.len() as u64);
                        out.extend_from_slice(&len[..n]);
                        out.extend_from_slice(v);
                    }
                }
            }
            ends.push(out.len());
        }
        Ok(())
    }
}

/// Where a column's cells are read from.
fn source<'a>(array: &'a ArrayRef, cell: Cell) -> Result<Source<'a>, ArrowError> {
    use DataType as T;
    let unexpected = || {
        ArrowError::InvalidArgumentError(format!(
            "a column of type {} where the schema has another",
            array.data_type()
        ))
    };
    Ok(match cell {
        Cell::Null => Source::Null,
        Cell::Bool => Source::Bool(array.as_boolean_opt().ok_or_else(unexpected)?),
        Cell::FixedBinary(_) => {
            Source::FixedBinary(array.as_fixed_size_binary_opt().ok_or_else(unexpected)?)
        }
        Cell::Fixed(width) => {
            // Row i is `values[i * width..][..width]` (the slice starts at the array's offset).
            let values = primitive_values(array)
                .filter(|v| v.len() >= array.len() * width)
                .ok_or_else(unexpected)?;
            Source::Fixed {
                values,
                width,
                array,
            }
        }
        Cell::Var { .. } => {
            let value: Box<dyn Fn(usize) -> &'a [u8] + 'a> = match array.data_type() {
                T::Utf8 => {
                    let a = array.as_string::<i32>();
                    Box::new(move |i| a.value(i).as_bytes())
                }
                T::LargeUtf8 => {
                    let a = array.as_string::<i64>();
                    Box::new(move |i| a.value(i).as_bytes())
                }
                T::Utf8View => {
                    let a = array.as_string_view();
                    Box::new(move |i| a.value(i).as_bytes())
                }
                T::Binary => {
                    let a = array.as_binary::<i32>();
                    Box::new(move |i| a.value(i))
                }
                T::LargeBinary => {
                    let a = array.as_binary::<i64>();
                    Box::new(move |i| a.value(i))
                }
                T::BinaryView => {
                    let a = array.as_binary_view();
                    Box::new(move |i| a.value(i))
                }
                _ => return Err(unexpected()),
            };
            Source::Var(value, array)
        }
    })
}

/// The values of a fixed-width array as bytes, from its first element.
fn primitive_values(array: &ArrayRef) -> Option<&[u8]> {
    use DataType as T;
    use arrow_array::types::*;
    macro_rules! values {
        ($t:ty) => {
            array
                .as_primitive_opt::<$t>()
                .map(|a| a.values().inner().as_slice())
        };
    }
    // `values()` is sliced to the array's offset and length.
    let sliced = match array.data_type() {
        T::Int8 => values!(Int8Type),
        T::Int16 => values!(Int16Type),
        T::Int32 => values!(Int32Type),
        T::Int64 => values!(Int64Type),
        T::UInt8 => values!(UInt8Type),
        T::UInt16 => values!(UInt16Type),
        T::UInt32 => values!(UInt32Type),
        T::UInt64 => values!(UInt64Type),
        T::Float16 => values!(Float16Type),
        T::Float32 => values!(Float32Type),
        T::Float64 => values!(Float64Type),
        T::Decimal32(..) => values!(Decimal32Type),
        T::Decimal64(..) => values!(Decimal64Type),
        T::Decimal128(..) => values!(Decimal128Type),
        T::Decimal256(..) => values!(Decimal256Type),
        T::Date32 => values!(Date32Type),
        T::Date64 => values!(Date64Type),
        T::Time32(arrow_schema::TimeUnit::Second) => values!(Time32SecondType),
        T::Time32(arrow_schema::TimeUnit::Millisecond) => values!(Time32MillisecondType),
        T::Time64(arrow_schema::TimeUnit::Microsecond) => values!(Time64MicrosecondType),
        T::Time64(arrow_schema::TimeUnit::Nanosecond) => values!(Time64NanosecondType),
        T::Timestamp(arrow_schema::TimeUnit::Second, _) => values!(TimestampSecondType),
        T::Timestamp(arrow_schema::TimeUnit::Millisecond, _) => values!(TimestampMillisecondType),
        T::Timestamp(arrow_schema::TimeUnit::Microsecond, _) => values!(TimestampMicrosecondType),
        T::Timestamp(arrow_schema::TimeUnit::Nanosecond, _) => values!(TimestampNanosecondType),
        _ => None,
    }?;
    Some(sliced)
}

/// Builds Arrow columns from encoded rows of one schema.
pub(crate) struct RowDecoder {
    /// Each column's output type (a dictionary's own type) and its cell layout.
    columns: Vec<(DataType, Cell)>,
    builders: Vec<ColumnBuilder>,
    rows: usize,
}

/// One column being built.
struct ColumnBuilder {
    nulls: NullBufferBuilder,
    /// Fixed-width values, fixed binaries, or the concatenated bytes of variable-length cells.
    values: Vec<u8>,
    /// Variable-length cells' lengths.
    lengths: Vec<usize>,
    bools: BooleanBufferBuilder,
}

impl ColumnBuilder {
    fn new() -> Self {
        ColumnBuilder {
            nulls: NullBufferBuilder::new(0),
            values: Vec::new(),
            lengths: Vec::new(),
            bools: BooleanBufferBuilder::new(0),
        }
    }
}

/// Moves the next `n` bytes of `rest` to `values`.
fn take(rest: &mut &[u8], n: usize, values: &mut Vec<u8>) -> Result<(), ArrowError> {
    let (v, r) = rest
        .split_at_checked(n)
        .ok_or_else(|| damaged("a cell runs past the row's end"))?;
    values.extend_from_slice(v);
    *rest = r;
    Ok(())
}

/// A damaged row: what was wrong.
fn damaged(what: &str) -> ArrowError {
    ArrowError::ParseError(format!("a kept row is damaged ({what})"))
}

impl RowDecoder {
    /// A decoder for rows encoded under `schema`, written to `path`.
    ///
    /// # Errors
    /// A column type [`RowEncoder`] cannot carry.
    pub(crate) fn new(path: &Path, schema: &Schema) -> Result<RowDecoder, DataError> {
        let columns: Vec<(DataType, Cell)> = schema
            .fields()
            .iter()
            .map(|f| f.data_type().clone())
            .zip(cells(path, schema)?)
            .collect();
        let builders = columns.iter().map(|_| ColumnBuilder::new()).collect();
        Ok(RowDecoder {
            columns,
            builders,
            rows: 0,
        })
    }

    /// Rows appended since the last [`finish`](Self::finish).
    pub(crate) fn len(&self) -> usize {
        self.rows
    }

    /// Appends one encoded row.
    ///
    /// # Errors
    /// The row does not hold what the schema says.
    pub(crate) fn push(&mut self, row: &[u8]) -> Result<(), ArrowError> {
        let map_bytes = self.columns.len().div_ceil(8);
        let (map, mut rest) = row
            .split_at_checked(map_bytes)
            .ok_or_else(|| damaged("shorter than its null map"))?;
        for (c, ((_, cell), b)) in self.columns.iter().zip(&mut self.builders).enumerate() {
            let null = map[c / 8] & (1 << (c % 8)) != 0;
            if null {
                b.nulls.append_null();
                match *cell {
                    Cell::Fixed(w) | Cell::FixedBinary(w) => {
                        b.values.resize(b.values.len() + w, 0);
                    }
                    Cell::Bool => b.bools.append(false),
                    Cell::Var { .. } => b.lengths.push(0),
                    Cell::Null => {}
                }
                continue;
            }
            b.nulls.append_non_null();
            match *cell {
                Cell::Null => return Err(damaged("a value in a column of nulls")),
                Cell::Fixed(w) | Cell::FixedBinary(w) => take(&mut rest, w, &mut b.values)?,
                Cell::Bool => {
                    let (&v, r) = rest
                        .split_first()
                        .ok_or_else(|| damaged("a cell runs past the row's end"))?;
                    if v > 1 {
                        return Err(damaged("a boolean that is neither 0 nor 1"));
                    }
                    b.bools.append(v == 1);
                    rest = r;
                }
                Cell::Var { .. } => {
                    let mut used = 0;
                    let len = read_varint_u64(rest, &mut used)
                        .ok_or_else(|| damaged("a cell's length is cut short"))?;
                    rest = rest.get(used..).unwrap_or_default();
                    let len = usize::try_from(len)
                        .ok()
                        .filter(|&l| l <= rest.len())
                        .ok_or_else(|| damaged("a cell runs past the row's end"))?;
                    take(&mut rest, len, &mut b.values)?;
                    b.lengths.push(len);
                }
            }
        }
        if !rest.is_empty() {
            return Err(damaged("bytes after its last cell"));
        }
        self.rows += 1;
        Ok(())
    }

    /// The columns of the rows appended so far (then empty again), in the schema's types.
    ///
    /// # Errors
    /// Arrow refuses a column (bytes that are not UTF-8 in a string column, offsets too large).
    pub(crate) fn finish(&mut self) -> Result<Vec<ArrayRef>, ArrowError> {
        let n = std::mem::take(&mut self.rows);
        let mut out = Vec::with_capacity(self.columns.len());
        for ((data_type, cell), b) in self.columns.iter().zip(&mut self.builders) {
            let taken = std::mem::replace(b, ColumnBuilder::new());
            let array = build(data_type, *cell, taken, n)?;
            out.push(array);
        }
        Ok(out)
    }
}

/// One column's array from its builder.
fn build(
    data_type: &DataType,
    cell: Cell,
    mut b: ColumnBuilder,
    n: usize,
) -> Result<ArrayRef, ArrowError> {
    use DataType as T;
    let nulls = b.nulls.finish();
    let carried = carried_type(data_type);
    let array: ArrayRef = match cell {
        Cell::Null => Arc::new(NullArray::new(n)),
        // Lengths agree: every row appends one value and one null bit.
        Cell::Bool => Arc::new(BooleanArray::new(b.bools.finish(), nulls)),
        Cell::FixedBinary(w) => Arc::new(FixedSizeBinaryArray::try_new(
            i32::try_from(w).map_err(|_| damaged("a fixed binary too wide"))?,
            Buffer::from_vec(b.values),
            nulls,
        )?),
        Cell::Fixed(_) => make_array(
            ArrayData::builder(carried.clone())
                .len(n)
                .add_buffer(Buffer::from_vec(b.values))
                .nulls(nulls)
                .build()?,
        ),
        Cell::Var { text } => {
            let total: usize = b.lengths.iter().sum();
            // Small offsets where they fit; views are built as large arrays, then cast.
            let small = matches!(carried, T::Utf8 | T::Binary);
            if small && i32::try_from(total).is_err() {
                return Err(ArrowError::ComputeError(
                    "over 2 GiB of strings in one batch of a Utf8 / Binary column".into(),
                ));
            }
            let values = Buffer::from_vec(std::mem::take(&mut b.values));
            let lengths = b.lengths.iter().copied();
            let array: ArrayRef = match (text, small) {
                (true, true) => Arc::new(GenericStringArray::<i32>::try_new(
                    OffsetBuffer::from_lengths(lengths),
                    values,
                    nulls,
                )?),
                (true, false) => Arc::new(GenericStringArray::<i64>::try_new(
                    OffsetBuffer::from_lengths(lengths),
                    values,
                    nulls,
                )?),
                (false, true) => Arc::new(GenericBinaryArray::<i32>::try_new(
                    OffsetBuffer::from_lengths(lengths),
                    values,
                    nulls,
                )?),
                (false, false) => Arc::new(GenericBinaryArray::<i64>::try_new(
                    OffsetBuffer::from_lengths(lengths),
                    values,
                    nulls,
                )?),
            };
            if array.data_type() == carried {
                array
            } else {
                arrow_cast::cast(&array, carried)?
            }
        }
    };
    if array.data_type() == data_type {
        Ok(array)
    } else {
        // A dictionary column: pack its values again.
        arrow_cast::cast(&array, data_type)
    }
}
