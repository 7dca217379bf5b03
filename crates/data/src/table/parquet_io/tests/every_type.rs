//! The table of every supported type that the round-trip test converts.

use arrow_array::types::{
    ArrowPrimitiveType, Date32Type, Date64Type, Decimal256Type, Float32Type, Float64Type, Int8Type,
    Int16Type, Int32Type, Int64Type, Time32MillisecondType, Time32SecondType,
    Time64MicrosecondType, Time64NanosecondType, TimestampMicrosecondType,
    TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use arrow_array::{
    Array, ArrayRef, BinaryArray, BinaryViewArray, BooleanArray, DictionaryArray,
    FixedSizeBinaryArray, Int64Array, LargeBinaryArray, LargeStringArray, NullArray,
    PrimitiveArray, RecordBatch, StringArray, StringViewArray,
};
use arrow_schema::DataType;
use std::sync::Arc;

/// arrow's 256-bit integer (its crate, arrow-buffer, is not a dependency of ours).
type I256 = <Decimal256Type as ArrowPrimitiveType>::Native;

/// Eight values, the third of them null.
fn row2_null<T: ArrowPrimitiveType>(values: [T::Native; 8]) -> PrimitiveArray<T> {
    let cells = values.into_iter().enumerate();
    cells.map(|(i, v)| (i != 2).then_some(v)).collect()
}

fn column(name: &str, array: impl Array + 'static) -> (&str, ArrayRef) {
    (name, Arc::new(array))
}

/// Eight rows of every supported type, with nulls and edge values; column `id` is a key.
pub(super) fn every_type() -> RecordBatch {
    use arrow_array::types::{Decimal32Type as D32, Decimal64Type as D64};
    use arrow_array::types::{Decimal128Type as D128, Decimal256Type as D256};
    let max38 = 10i128.pow(38) - 1;
    let big = I256::from_i128(max38).wrapping_mul(I256::from_i128(max38));
    let [zero, one, five, seven, n123] = [0, 1, 5, 7, 123].map(I256::from_i128);
    let strings = [
        Some(""),
        Some("a,b"),
        Some("say \"hi\""),
        Some("line1\nline2\r\nline3\r"),
        None,
        Some("NULL"),
        Some("héllo 名前 \u{feff}"),
        Some("\""),
    ];
    let binaries: [Option<&[u8]>; 8] = [
        Some(b""),
        Some(b"\x00\xff"),
        None,
        Some(b"abc"),
        Some(b"\"\n,"),
        Some(b"NULL"),
        Some(&[0x12, 0x34]),
        Some(b"z"),
    ];
    let fixed: [Option<&[u8]>; 8] = [
        Some(b"\x00\x00\x00"),
        Some(b"\xff\xfe\xfd"),
        None,
        Some(b"abc"),
        Some(b"\"\n,"),
        Some(b"NUL"),
        Some(b"123"),
        None,
    ];
    let half =
        row2_null::<Float32Type>([0.5, 0.1, 0.0, -0.0, 65504.0, f32::INFINITY, f32::NAN, 6e-8]);
    let dict: DictionaryArray<Int32Type> = [
        Some("x"),
        Some("y"),
        None,
        Some("x"),
        Some(""),
        Some("a,b"),
        Some("y"),
        None,
    ]
    .into_iter()
    .collect();
    let dict_of_ints = DataType::Dictionary(Box::new(DataType::Int8), Box::new(DataType::Int64));
    let bools = [1, 0, 2, 1, 0, 2, 1, 1].map(|b| (b < 2).then_some(b == 1));
    let utc = "UTC";
    RecordBatch::try_from_iter([
        column("id", Int64Array::from_iter_values(0..8)),
        column(
            "i8",
            row2_null::<Int8Type>([i8::MIN, i8::MAX, 0, 0, -1, 1, 2, 3]),
        ),
        column(
            "i16",
            row2_null::<Int16Type>([i16::MIN, i16::MAX, 0, 0, -1, 1, 2, 3]),
        ),
        column(
            "i32",
            row2_null::<Int32Type>([i32::MIN, i32::MAX, 0, 0, -1, 1, 2, 3]),
        ),
        column(
            "i64",
            row2_null::<Int64Type>([i64::MIN, i64::MAX, 0, 0, -1, 1, 2, 3]),
        ),
        column("u8", row2_null::<UInt8Type>([0, u8::MAX, 0, 1, 2, 3, 4, 5])),
        column(
            "u16",
            row2_null::<UInt16Type>([0, u16::MAX, 0, 1, 2, 3, 4, 5]),
        ),
        column(
            "u32",
            row2_null::<UInt32Type>([0, u32::MAX, 0, 1, 2, 3, 4, 5]),
        ),
        column(
            "u64",
            row2_null::<UInt64Type>([0, u64::MAX, 0, 1, 2, 3, 4, 5]),
        ),
        ("f16", arrow_cast::cast(&half, &DataType::Float16).unwrap()),
        column(
            "f32",
            row2_null::<Float32Type>([
                f32::NAN,
                f32::INFINITY,
                0.0,
                -0.0,
                f32::NEG_INFINITY,
                f32::MIN_POSITIVE,
                1e-45,
                f32::MAX,
            ]),
        ),
        column(
            "f64",
            row2_null::<Float64Type>([
                f64::NAN,
                f64::INFINITY,
                0.0,
                -0.0,
                f64::NEG_INFINITY,
                5e-324,
                0.1,
                1e300,
            ]),
        ),
        column("bool", BooleanArray::from(bools.to_vec())),
        column("utf8", StringArray::from(strings.to_vec())),
        column("large_utf8", LargeStringArray::from(strings.to_vec())),
        column("utf8_view", StringViewArray::from(strings.to_vec())),
        column("binary", BinaryArray::from(binaries.to_vec())),
        column("large_binary", LargeBinaryArray::from(binaries.to_vec())),
        column("binary_view", BinaryViewArray::from(binaries.to_vec())),
        column(
            "fixed",
            FixedSizeBinaryArray::try_from_sparse_iter_with_size(fixed.into_iter(), 3).unwrap(),
        ),
        column(
            "dec128",
            row2_null::<D128>([max38, -max38, 0, 0, -5, 1, 10i128.pow(20), 123])
                .with_data_type(DataType::Decimal128(38, 10)),
        ),
        column(
            "dec128_s0",
            row2_null::<D128>([9_999_999_999, -9_999_999_999, 0, 0, -5, 1, 42, 123])
                .with_data_type(DataType::Decimal128(10, 0)),
        ),
        column(
            "dec256",
            row2_null::<D256>([big, -one, zero, zero, -five, one, seven, n123])
                .with_data_type(DataType::Decimal256(76, 20)),
        ),
        column(
            "dec32",
            row2_null::<D32>([999_999_999, -999_999_999, 0, 0, -5, 1, 7, 123])
                .with_data_type(DataType::Decimal32(9, 2)),
        ),
        column(
            "dec64",
            row2_null::<D64>([999_999_999_999_999_999, -1, 0, 0, -5, 1, 7, 123])
                .with_data_type(DataType::Decimal64(18, 4)),
        ),
        column(
            "date32",
            row2_null::<Date32Type>([0, -1, 0, -719_162, 2_932_896, 3_000_000, -800_000, 19_000]),
        ),
        column(
            "date64",
            row2_null::<Date64Type>([
                0,
                86_400_000,
                0,
                -86_400_000,
                1_700_000_000_123,
                -1,
                253_402_300_800_000,
                1_000,
            ]),
        ),
        column(
            "time32s",
            row2_null::<Time32SecondType>([0, 86_399, 0, 1, 3600, 45_296, 59, 60]),
        ),
        column(
            "time32ms",
            row2_null::<Time32MillisecondType>([
                0, 86_399_999, 0, 1, 3_600_000, 45_296_789, 10, 100,
            ]),
        ),
        column(
            "time64us",
            row2_null::<Time64MicrosecondType>([
                0,
                86_399_999_999,
                0,
                1,
                1_000,
                45_296_789_012,
                10,
                100,
            ]),
        ),
        column(
            "time64ns",
            row2_null::<Time64NanosecondType>([
                0,
                86_399_999_999_999,
                0,
                1,
                1_000,
                45_296_789_012_345,
                1_000_000,
                100,
            ]),
        ),
        column(
            "ts_s",
            row2_null::<TimestampSecondType>([
                0,
                -1,
                0,
                253_402_300_800,
                -62_135_596_801,
                1_700_000_000,
                -62_135_596_800,
                5,
            ]),
        ),
        column(
            "ts_ms",
            row2_null::<TimestampMillisecondType>([
                0,
                -1,
                0,
                253_402_300_800_000,
                1_700_000_000_123,
                1,
                999,
                -1001,
            ]),
        ),
        column(
            "ts_us",
            row2_null::<TimestampMicrosecondType>([
                0,
                -1,
                0,
                253_402_300_800_000_001,
                1_700_000_000_123_456,
                1,
                999,
                -1001,
            ]),
        ),
        column(
            "ts_ns",
            row2_null::<TimestampNanosecondType>([
                i64::MIN,
                i64::MAX,
                0,
                0,
                -1,
                1_700_000_000_123_456_789,
                1_000,
                1_000_000,
            ]),
        ),
        column(
            "ts_utc",
            row2_null::<TimestampMicrosecondType>([0, -1, 0, 1_700_000_000_123_456, 1, 2, 3, 4])
                .with_timezone(utc),
        ),
        column(
            "ts_offset",
            row2_null::<TimestampMillisecondType>([0, -1, 0, 1_700_000_000_123, 1, 2, 3, 4])
                .with_timezone("+05:30"),
        ),
        column(
            "ts_named",
            row2_null::<TimestampNanosecondType>([0, -1, 0, 1_700_000_000_123_456_789, 1, 2, 3, 4])
                .with_timezone("America/New_York"),
        ),
        column(
            "ts_s_utc",
            row2_null::<TimestampSecondType>([0, -1, 0, 253_402_300_800, 1, 2, 3, 4])
                .with_timezone(utc),
        ),
        column("dict", dict),
        (
            "int_dict",
            arrow_cast::cast(
                &row2_null::<Int64Type>([7, 7, 0, i64::MIN, 0, 1, 7, 7]),
                &dict_of_ints,
            )
            .unwrap(),
        ),
        column("null", NullArray::new(8)),
    ])
    .unwrap()
}
