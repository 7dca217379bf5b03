//! The CSV text of each cell of a record batch, per Arrow type (see the table in the
//! [module docs](super)): what a Parquet input's keys are hashed as, and what a CSV output of it
//! holds.

use super::UNIX_EPOCH_DAYS_FROM_CE;
use super::read::unreadable;
use crate::error::DataError;
use arrow_array::cast::AsArray;
use arrow_array::types::{
    ArrowPrimitiveType, Date32Type, Date64Type, Decimal32Type, Decimal64Type, Decimal128Type,
    Decimal256Type, DecimalType, Float16Type, Float32Type, Float64Type, Int8Type, Int16Type,
    Int32Type, Int64Type, Time32MillisecondType, Time32SecondType, Time64MicrosecondType,
    Time64NanosecondType, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrayRef};
use arrow_schema::{DataType, Field, TimeUnit};
use chrono::{DateTime, NaiveDate, NaiveTime};
use std::fmt::Debug;
use std::io::Write;
use std::path::Path;

/// Writes the text of one cell (never called for a null cell); `Err` says why it cannot.
type CellWriter = Box<dyn Fn(usize, &mut Vec<u8>) -> Result<(), String>>;

/// One column of a record batch, ready to be written as CSV text.
pub(super) struct ColumnText {
    /// The column, with a dictionary replaced by its values.
    array: ArrayRef,
    /// A Null column is all null without a null buffer.
    all_null: bool,
    /// Byte length of a string or binary value, for the empty-key check.
    byte_len: Option<Box<dyn Fn(usize) -> usize>>,
    pub(super) cells: CellWriter,
}

impl ColumnText {
    pub(super) fn new(
        path: &Path,
        field: &Field,
        array: &ArrayRef,
    ) -> Result<ColumnText, DataError> {
        let array = match array.data_type() {
            DataType::Dictionary(_, value) => arrow_cast::cast(array, value)
                .map_err(|e| unreadable(path, &format!("column {:?}: {e}", field.name())))?,
            _ => array.clone(),
        };
        let unsupported = || DataError::UnsupportedParquetType {
            path: path.to_path_buf(),
            column: field.name().clone(),
            data_type: array.data_type().to_string(),
        };
        Ok(ColumnText {
            all_null: array.data_type() == &DataType::Null,
            byte_len: byte_len(&array),
            cells: cell_writer(&array).ok_or_else(unsupported)?,
            array,
        })
    }

    pub(super) fn is_null(&self, row: usize) -> bool {
        self.all_null || self.array.is_null(row)
    }

    pub(super) fn is_empty_value(&self, row: usize) -> bool {
        self.byte_len.as_ref().is_some_and(|len| len(row) == 0)
    }
}

fn byte_len(array: &ArrayRef) -> Option<Box<dyn Fn(usize) -> usize>> {
    use DataType as T;
    Some(match array.data_type() {
        T::Utf8 => {
            let a = array.as_string::<i32>().clone();
            Box::new(move |i| a.value(i).len())
        }
        T::LargeUtf8 => {
            let a = array.as_string::<i64>().clone();
            Box::new(move |i| a.value(i).len())
        }
        T::Utf8View => {
            let a = array.as_string_view().clone();
            Box::new(move |i| a.value(i).len())
        }
        T::Binary => {
            let a = array.as_binary::<i32>().clone();
            Box::new(move |i| a.value(i).len())
        }
        T::LargeBinary => {
            let a = array.as_binary::<i64>().clone();
            Box::new(move |i| a.value(i).len())
        }
        T::BinaryView => {
            let a = array.as_binary_view().clone();
            Box::new(move |i| a.value(i).len())
        }
        _ => return None,
    })
}

/// The cell writer for a (non-dictionary) array, or `None` if its type is not supported.
fn cell_writer(array: &ArrayRef) -> Option<CellWriter> {
    use DataType as T;
    Some(match array.data_type() {
        T::Null => Box::new(|_, _| Ok(())),
        T::Boolean => {
            let a = array.as_boolean().clone();
            Box::new(move |i, out| {
                out.extend_from_slice(if a.value(i) { b"true" } else { b"false" });
                Ok(())
            })
        }
        T::Int8 => primitive::<Int8Type>(array, write_display),
        T::Int16 => primitive::<Int16Type>(array, write_display),
        T::Int32 => primitive::<Int32Type>(array, write_display),
        T::Int64 => primitive::<Int64Type>(array, write_display),
        T::UInt8 => primitive::<UInt8Type>(array, write_display),
        T::UInt16 => primitive::<UInt16Type>(array, write_display),
        T::UInt32 => primitive::<UInt32Type>(array, write_display),
        T::UInt64 => primitive::<UInt64Type>(array, write_display),
        // A half float is exactly an f32; the shortest f32 text parses back to it.
        T::Float16 => primitive::<Float16Type>(array, |v, out| write_debug(f32::from(v), out)),
        T::Float32 => primitive::<Float32Type>(array, write_debug),
        T::Float64 => primitive::<Float64Type>(array, write_debug),
        T::Utf8 => {
            let a = array.as_string::<i32>().clone();
            Box::new(move |i, out| quoted(a.value(i).as_bytes(), out))
        }
        T::LargeUtf8 => {
            let a = array.as_string::<i64>().clone();
            Box::new(move |i, out| quoted(a.value(i).as_bytes(), out))
        }
        T::Utf8View => {
            let a = array.as_string_view().clone();
            Box::new(move |i, out| quoted(a.value(i).as_bytes(), out))
        }
        T::Binary => {
            let a = array.as_binary::<i32>().clone();
            Box::new(move |i, out| quoted_hex(a.value(i), out))
        }
        T::LargeBinary => {
            let a = array.as_binary::<i64>().clone();
            Box::new(move |i, out| quoted_hex(a.value(i), out))
        }
        T::BinaryView => {
            let a = array.as_binary_view().clone();
            Box::new(move |i, out| quoted_hex(a.value(i), out))
        }
        T::FixedSizeBinary(_) => {
            let a = array.as_fixed_size_binary().clone();
            Box::new(move |i, out| quoted_hex(a.value(i), out))
        }
        &T::Decimal32(p, s) => decimal::<Decimal32Type>(array, p, s),
        &T::Decimal64(p, s) => decimal::<Decimal64Type>(array, p, s),
        &T::Decimal128(p, s) => decimal::<Decimal128Type>(array, p, s),
        &T::Decimal256(p, s) => decimal::<Decimal256Type>(array, p, s),
        T::Date32 => primitive::<Date32Type>(array, |days, out| {
            let date = days
                .checked_add(UNIX_EPOCH_DAYS_FROM_CE)
                .and_then(NaiveDate::from_num_days_from_ce_opt)
                .ok_or_else(|| out_of_range(days, "days"))?;
            write_debug(date, out)
        }),
        T::Date64 => primitive::<Date64Type>(array, |ms, out| {
            let at = DateTime::from_timestamp_millis(ms)
                .ok_or_else(|| out_of_range(ms, "ms"))?
                .naive_utc();
            if at.time() == NaiveTime::MIN {
                write_debug(at.date(), out)
            } else {
                write_debug(at, out)
            }
        }),
        T::Time32(TimeUnit::Second) => primitive::<Time32SecondType>(array, |v, out| {
            write_time(i64::from(v), 1_000_000_000, out)
        }),
        T::Time32(TimeUnit::Millisecond) => primitive::<Time32MillisecondType>(array, |v, out| {
            write_time(i64::from(v), 1_000_000, out)
        }),
        T::Time64(TimeUnit::Microsecond) => {
            primitive::<Time64MicrosecondType>(array, |v, out| write_time(v, 1_000, out))
        }
        T::Time64(TimeUnit::Nanosecond) => {
            primitive::<Time64NanosecondType>(array, |v, out| write_time(v, 1, out))
        }
        T::Timestamp(unit, tz) => {
            let (unit, utc) = (*unit, tz.is_some());
            let text = move |v: i64, out: &mut Vec<u8>| write_timestamp(v, unit, utc, out);
            match unit {
                TimeUnit::Second => primitive::<TimestampSecondType>(array, text),
                TimeUnit::Millisecond => primitive::<TimestampMillisecondType>(array, text),
                TimeUnit::Microsecond => primitive::<TimestampMicrosecondType>(array, text),
                TimeUnit::Nanosecond => primitive::<TimestampNanosecondType>(array, text),
            }
        }
        _ => return None,
    })
}

fn primitive<T: ArrowPrimitiveType>(
    array: &ArrayRef,
    text: impl Fn(T::Native, &mut Vec<u8>) -> Result<(), String> + 'static,
) -> CellWriter {
    let a = array.as_primitive::<T>().clone();
    Box::new(move |i, out| text(a.value(i), out))
}

fn decimal<T: DecimalType>(array: &ArrayRef, precision: u8, scale: i8) -> CellWriter {
    primitive::<T>(array, move |v, out| {
        out.extend_from_slice(T::format_decimal(v, precision, scale).as_bytes());
        Ok(())
    })
}

fn write_display(value: impl std::fmt::Display, out: &mut Vec<u8>) -> Result<(), String> {
    write!(out, "{value}").map_err(|e| e.to_string())
}

/// `Debug` is the shortest round-trip text for floats (with an exponent when long), and
/// `YYYY-MM-DD` / `YYYY-MM-DDTHH:MM:SS.f` / `HH:MM:SS.f` for chrono's naive types (as chrono
/// documents their `Debug`).
fn write_debug(value: impl Debug, out: &mut Vec<u8>) -> Result<(), String> {
    write!(out, "{value:?}").map_err(|e| e.to_string())
}

fn out_of_range(value: impl std::fmt::Display, unit: &str) -> String {
    format!("{value} {unit} is outside the dates chrono can write (years -262143 to 262142)")
}

/// A time of day given in units of `nanos_per_unit` nanoseconds since midnight.
pub(super) fn write_time(value: i64, nanos_per_unit: i64, out: &mut Vec<u8>) -> Result<(), String> {
    let units_per_second = 1_000_000_000 / nanos_per_unit;
    let time = u32::try_from(value.div_euclid(units_per_second))
        .ok()
        .zip(u32::try_from(value.rem_euclid(units_per_second) * nanos_per_unit).ok())
        .filter(|_| value >= 0)
        .and_then(|(secs, nanos)| NaiveTime::from_num_seconds_from_midnight_opt(secs, nanos))
        .ok_or_else(|| format!("{value} is not a time of day (0 to 24 hours)"))?;
    write_debug(time, out)
}

pub(super) fn write_timestamp(
    value: i64,
    unit: TimeUnit,
    utc: bool,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let at = match unit {
        TimeUnit::Second => DateTime::from_timestamp(value, 0),
        TimeUnit::Millisecond => DateTime::from_timestamp_millis(value),
        TimeUnit::Microsecond => DateTime::from_timestamp_micros(value),
        TimeUnit::Nanosecond => Some(DateTime::from_timestamp_nanos(value)),
    }
    .ok_or_else(|| out_of_range(value, unit_name(unit)))?;
    write_debug(at.naive_utc(), out)?;
    if utc {
        out.push(b'Z');
    }
    Ok(())
}

fn unit_name(unit: TimeUnit) -> &'static str {
    match unit {
        TimeUnit::Second => "s",
        TimeUnit::Millisecond => "ms",
        TimeUnit::Microsecond => "µs",
        TimeUnit::Nanosecond => "ns",
    }
}

/// `value` as one quoted CSV field, `"` doubled.
fn quoted(value: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    out.push(b'"');
    for chunk in value.split_inclusive(|&b| b == b'"') {
        out.extend_from_slice(chunk);
        if chunk.ends_with(b"\"") {
            out.push(b'"');
        }
    }
    out.push(b'"');
    Ok(())
}

fn quoted_hex(value: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(value.len() * 2 + 2);
    out.push(b'"');
    for &b in value {
        out.push(HEX[usize::from(b >> 4)]);
        out.push(HEX[usize::from(b & 0x0f)]);
    }
    out.push(b'"');
    Ok(())
}
